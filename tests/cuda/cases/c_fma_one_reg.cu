#include "modez.h"
// clean: the multiplier 1.0 is moved into a register first (a known value), then an fma in inline asm.
extern "C" __global__ void k(const float* a, const float* b, float* out) {
    unsigned i = threadIdx.x;
    float r;
    asm("fma.rn.f32 %0, %1, %2, %3;" : "=f"(r) : "f"(z(a[i])), "f"(1.0f), "f"(z(b[i])));
    out[i] = z(r);
}

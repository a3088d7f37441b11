#include "modez.h"
// clean: an fma whose multiplier is the constant 1.0 is a rounded add (fma(1, a, b) = RN(a + b)).
extern "C" __global__ void k(const float* a, const float* b, float* out) {
    unsigned i = threadIdx.x;
    float r;
    asm("fma.rn.f32 %0, 0f3F800000, %1, %2;" : "=f"(r) : "f"(z(a[i])), "f"(z(b[i])));
    out[i] = z(r);
}

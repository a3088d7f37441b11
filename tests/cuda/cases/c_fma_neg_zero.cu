#include "modez.h"
// clean: an fma whose addend is -0.0 is a rounded multiply (a * b + -0 = RN(a * b), -0 included).
extern "C" __global__ void k(const float* a, const float* b, float* out) {
    unsigned i = threadIdx.x;
    float r;
    asm("fma.rn.f32 %0, %1, %2, 0f80000000;" : "=f"(r) : "f"(z(a[i])), "f"(z(b[i])));
    out[i] = z(r);
}

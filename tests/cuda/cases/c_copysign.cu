#include "modez.h"
// clean: copysignf and fabsf only move the sign bit; the arithmetic is rounded to nearest.
extern "C" __global__ void k(const float* a, const float* b, float* out) {
    unsigned i = threadIdx.x;
    float m = copysignf(z(a[i]), b[i]);
    out[i] = z(__fadd_rn(m, fabsf(z(b[i]))));
}

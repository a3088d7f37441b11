#include "modez.h"
// violating: the product of three floats in f64: the second product is not exact, then a second rounding.
extern "C" __global__ void k(const float* a, const float* b, const float* c, float* out) {
    unsigned i = threadIdx.x;
    out[i] = z((float)((double)z(a[i]) * (double)z(b[i]) * (double)z(c[i])));
}

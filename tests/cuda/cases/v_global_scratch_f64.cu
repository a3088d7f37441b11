#include "modez.h"
// violating: promoted floats written to a global scratch buffer given as an argument, read back by
// another lane and combined in f64 (u * u + u): an f32 computation rounded twice.
extern "C" __global__ void k(const float* a, double* scratch, float* out) {
    unsigned t = threadIdx.x;
    scratch[t] = (double)z(a[t]);
    __syncthreads();
    double u = scratch[t ^ 1];
    out[t] = z((float)(u * u + u));
}

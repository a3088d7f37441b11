#include "modez.h"
// violating: promoted floats through dynamic (extern) shared memory, then a product of three in f64,
// rounded once: the second product rounded in f64, then again.
extern "C" __global__ void k(const float* a, float* out) {
    extern __shared__ double dbuf[];
    unsigned t = threadIdx.x;
    dbuf[t] = (double)z(a[t]);
    __syncthreads();
    out[t] = z((float)(dbuf[t ^ 1] * dbuf[t] * dbuf[t ^ 2]));
}

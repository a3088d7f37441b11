#include "modez.h"
// violating: a promoted float stored through a generic pointer in a __noinline__ function into shared
// memory, read back in the kernel and combined in f64.
__device__ __noinline__ void put(double* p, unsigned j, double v) { p[j] = v; }
extern "C" __global__ void k(const float* a, float* out) {
    __shared__ double s[128];
    unsigned t = threadIdx.x;
    put(s, t, (double)z(a[t]));
    __syncthreads();
    double u = s[t ^ 1];
    out[t] = z((float)(u * u + u));
}

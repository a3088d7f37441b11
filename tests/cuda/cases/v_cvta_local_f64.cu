#include "modez.h"
// violating: promoted floats written through a generic pointer into a local array (cvta), the
// pointer chosen at run time, read back and combined in f64.
__device__ __noinline__ double pick(const double* p, int j) { return p[j]; }
extern "C" __global__ void k(const float* a, float* out, int n) {
    double t[4];
    for (int j = 0; j < 4; j++) t[j] = (double)z(a[j * 32 + threadIdx.x]);
    double u = pick(t, n & 3);
    out[threadIdx.x] = z((float)(u * u + u));
}

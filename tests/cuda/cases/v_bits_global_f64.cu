#include "modez.h"
// violating: a promoted float's bits stored as a 64-bit integer to global memory and read back as a
// double by another lane, then combined in f64.
extern "C" __global__ void k(const float* a, long long* bits, float* out) {
    unsigned t = threadIdx.x;
    bits[t] = __double_as_longlong((double)z(a[t]));
    __syncthreads();
    double u = __longlong_as_double(bits[t ^ 1]);
    out[t] = z((float)(u * u + u));
}

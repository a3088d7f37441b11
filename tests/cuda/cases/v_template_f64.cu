#include "modez.h"
// violating: a polynomial template instantiated for double on promoted floats, rounded once at the end.
template <typename T>
__device__ T poly(T x, const float* c) {
    return ((T(c[3]) * x + T(c[2])) * x + T(c[1])) * x + T(c[0]);
}
extern "C" __global__ void k(const float* a, const float* c, float* out) {
    out[threadIdx.x] = z((float)poly<double>((double)z(a[threadIdx.x]), c));
}

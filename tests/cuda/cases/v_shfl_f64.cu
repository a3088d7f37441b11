#include "modez.h"
// violating: a promoted float shuffled as a double (two 32-bit shuffles), then combined in f64.
extern "C" __global__ void k(const float* a, float* out) {
    unsigned t = threadIdx.x;
    double p = (double)z(a[t]);
    double q = __shfl_xor_sync(0xffffffffu, p, 1);
    out[t] = z((float)(p * q + q));
}

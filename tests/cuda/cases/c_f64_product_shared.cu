#include "modez.h"
// clean: the exact f64 product of two floats goes through shared memory before its one rounding.
extern "C" __global__ void k(const float* a, const float* b, float* out) {
    __shared__ double s[128];
    unsigned t = threadIdx.x;
    s[t] = __dmul_rn((double)z(a[t]), (double)z(b[t]));
    __syncthreads();
    out[t] = z(__double2float_rn(s[t ^ 1]));
}

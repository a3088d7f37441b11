#include "modez.h"
// violating: a / b under --prec-div=false is div.full, not correctly rounded.
extern "C" __global__ void k(const float* a, const float* b, float* out) {
    out[threadIdx.x] = z(z(a[threadIdx.x]) / z(b[threadIdx.x]));
}

#include "modez.h"
// violating: sqrtf under --prec-sqrt=false is sqrt.approx.
extern "C" __global__ void k(const float* a, float* out) {
    out[threadIdx.x] = z(sqrtf(z(a[threadIdx.x])));
}

#include "modez.h"
// violating: __fsqrt_rd rounds down.
extern "C" __global__ void k(const float* a, float* out) {
    out[threadIdx.x] = z(__fsqrt_rd(z(a[threadIdx.x])));
}

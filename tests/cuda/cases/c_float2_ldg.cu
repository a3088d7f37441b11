#include "modez.h"
// clean: float2 through the read-only cache (__ldg), a rounded product of its halves.
extern "C" __global__ void k(const float2* __restrict__ a, float* out) {
    float2 v = __ldg(a + threadIdx.x);
    out[threadIdx.x] = z(__fmul_rn(z(v.x), z(v.y)));
}

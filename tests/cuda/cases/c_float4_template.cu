#include "modez.h"
// clean: a template over the vector width, float4 loads, products rounded to nearest.
template <int N>
__device__ float dot(const float4* a, const float4* b) {
    float s = 0.0f;
#pragma unroll
    for (int j = 0; j < N; j++) {
        float4 x = a[j], y = b[j];
        s = z(__fadd_rn(s, z(__fmul_rn(z(x.x), z(y.x)))));
        s = z(__fadd_rn(s, z(__fmul_rn(z(x.w), z(y.w)))));
    }
    return s;
}
extern "C" __global__ void k(const float4* a, const float4* b, float* out) {
    out[threadIdx.x] = dot<2>(a + 2 * threadIdx.x, b + 2 * threadIdx.x);
}

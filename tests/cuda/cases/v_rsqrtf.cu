#include "modez.h"
// violating: rsqrtf, an approximate reciprocal square root.
extern "C" __global__ void k(const float* a, float* out) {
    out[threadIdx.x] = z(__fmul_rn(z(a[threadIdx.x]), rsqrtf(z(a[threadIdx.x + 1]))));
}

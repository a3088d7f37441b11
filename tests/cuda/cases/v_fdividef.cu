#include "modez.h"
// violating: __fdividef, the fast division (approximate).
extern "C" __global__ void k(const float* a, const float* b, float* out) {
    out[threadIdx.x] = z(__fdividef(z(a[threadIdx.x]), z(b[threadIdx.x])));
}

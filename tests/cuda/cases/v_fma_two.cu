#include "modez.h"
// violating: an fma with the constant multiplier 2.0 is RN(2a + b), one rounding: 2a may overflow in
// mode Z's multiply and not in the fma.
extern "C" __global__ void k(const float* a, const float* b, float* out) {
    out[threadIdx.x] = z(__fmaf_rn(2.0f, z(a[threadIdx.x]), z(b[threadIdx.x])));
}

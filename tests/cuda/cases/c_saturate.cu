#include "modez.h"
// clean: __saturatef clamps to [0, 1] (NaN to 0): one of three exact values, no rounding.
extern "C" __global__ void k(const float* a, const float* b, float* out) {
    unsigned i = threadIdx.x;
    out[i] = __saturatef(z(__fadd_rn(z(a[i]), z(b[i]))));
}

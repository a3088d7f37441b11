#include "modez.h"
// clean: isnan, isinf, signbit and isfinite on floats: class tests, no float result.
extern "C" __global__ void k(const float* a, int* out, float* o2) {
    unsigned i = threadIdx.x;
    float x = z(a[i]);
    out[i] = (isnan(x) ? 1 : 0) | (isinf(x) ? 2 : 0) | (signbit(x) ? 4 : 0) | (isfinite(x) ? 8 : 0);
    o2[i] = z(__fsub_rn(x, z(a[i + 1])));
}

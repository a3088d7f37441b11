#include "modez.h"
// clean: floats compared after widening to double (exact), the choice rounded in float.
extern "C" __global__ void k(const float* a, const float* b, float* out) {
    unsigned i = threadIdx.x;
    float x = z(a[i]), y = z(b[i]);
    double dx = x, dy = y;
    out[i] = dx < dy ? z(__fsub_rn(y, x)) : z(__fsub_rn(x, y));
}

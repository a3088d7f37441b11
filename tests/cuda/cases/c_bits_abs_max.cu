#include "modez.h"
// clean: the sign cleared through the integer view, fmaxf/fminf, and a rounded difference.
extern "C" __global__ void k(const float* a, const float* b, float* out) {
    unsigned i = threadIdx.x;
    float x = __int_as_float(__float_as_int(z(a[i])) & 0x7fffffff);
    float y = fminf(fmaxf(x, z(b[i])), 8.0f);
    out[i] = z(__fsub_rn(y, x));
}

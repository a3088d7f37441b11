#include "modez.h"
// clean: coefficients in __constant__ memory, Horner with every operation rounded on its own.
__constant__ float coef[4];
extern "C" __global__ void k(const float* x, float* out) {
    float v = z(x[threadIdx.x]);
    float s = coef[3];
    for (int j = 2; j >= 0; j--) s = z(__fadd_rn(z(__fmul_rn(s, v)), coef[j]));
    out[threadIdx.x] = s;
}

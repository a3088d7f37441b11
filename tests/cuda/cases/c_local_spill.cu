#include "modez.h"
// clean: a float array indexed at run time stays in local memory; the arithmetic is rounded.
extern "C" __global__ void k(const float* a, float* out, int n) {
    float t[16];
    for (int j = 0; j < 16; j++) t[j] = z(a[j * 32 + threadIdx.x]);
    float s = t[n & 15];
    for (int j = 0; j < 16; j++) s = z(__fadd_rn(s, t[(n + j) & 15]));
    out[threadIdx.x] = s;
}

#include "modez.h"
// violating: a warp dot product in plain C: each lane's product and the shuffled sum contract.
extern "C" __global__ void k(const float* a, const float* b, float* out) {
    float v = z(a[threadIdx.x]) * z(b[threadIdx.x]);
    for (int o = 16; o > 0; o >>= 1) v = v * 1.0f + __shfl_xor_sync(0xffffffffu, v, o) * z(b[o]);
    out[threadIdx.x] = z(v);
}

#include "modez.h"
// clean: a block reduction through dynamic (extern) shared memory, every add rounded and flushed.
extern "C" __global__ void k(const float* a, float* out) {
    extern __shared__ float buf[];
    unsigned t = threadIdx.x;
    buf[t] = z(a[blockIdx.x * blockDim.x + t]);
    __syncthreads();
    for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
        if (t < s) buf[t] = z(__fadd_rn(buf[t], buf[t + s]));
        __syncthreads();
    }
    if (t == 0) out[blockIdx.x] = buf[0];
}

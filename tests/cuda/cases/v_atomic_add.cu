#include "modez.h"
// violating: atomicAdd on a float: the hardware's add (it flushes subnormals) in the order lanes arrive.
extern "C" __global__ void k(const float* a, float* acc) {
    atomicAdd(acc, z(a[threadIdx.x]));
}

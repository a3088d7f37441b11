#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>
#include "modez.h"
namespace cg = cooperative_groups;
// clean: cooperative groups' tile reduction with an operator that rounds to nearest and flushes.
struct zadd {
    __device__ float operator()(float a, float b) const { return z(__fadd_rn(a, b)); }
};
extern "C" __global__ void k(const float* a, float* out) {
    cg::thread_block_tile<32> tile = cg::tiled_partition<32>(cg::this_thread_block());
    float v = cg::reduce(tile, z(a[threadIdx.x]), zadd());
    if (tile.thread_rank() == 0) out[threadIdx.x >> 5] = v;
}

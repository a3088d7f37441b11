#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>
#include "modez.h"
namespace cg = cooperative_groups;
// violating: cg::reduce with cg::plus<float>: plain adds, and the first fused with the product.
extern "C" __global__ void k(const float* a, const float* b, float* out) {
    cg::thread_block_tile<32> tile = cg::tiled_partition<32>(cg::this_thread_block());
    float v = cg::reduce(tile, z(a[threadIdx.x]) * z(b[threadIdx.x]) + z(b[threadIdx.x + 32]), cg::plus<float>());
    if (tile.thread_rank() == 0) out[threadIdx.x >> 5] = z(v);
}

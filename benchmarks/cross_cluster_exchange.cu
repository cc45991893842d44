// The floor of one step's h exchange when W_hh spans several clusters (issue 14's LSTM fp16
// H=1024 B=8: 8 MiB of W_hh fits no cluster of 16, docs/design-notes.md, "Issue 14's LSTM fp16
// H=1024 B=8: what 1.5× would take"). NC clusters of CL blocks; every block owns VALUES of
// h (NC·CL·VALUES = TOTAL, the grid_exchange.cu shape: 8192 = H·B) and each step needs all
// of it, as the product does. k_cross publishes a step's values twice:
//   - to every block of its own cluster by st.async into the peer's shared memory, with
//     the peer's mbarrier counting the bytes (cluster_exchange.cu's k_async, 0.25 µs);
//   - to the other clusters through L2: plain stores, then one thread a block fences and
//     adds 1 to its cluster's counter (red.release.gpu), so that a cluster's counter reads
//     (t + 1)·CL once all its blocks have published step t. Each block polls the other
//     clusters' counters (one thread each, ld.acquire.gpu), then reads their values
//     (__ldcg) and its own cluster's from shared memory.
// No grid barrier: a block waits only for what it reads. The sum and next_value are
// grid_exchange.cu's (exchange_common.cuh), in the same order, so k_cross's output equals
// that file's k_flags' at BLOCKS = NC·CL (cross_cluster_exchange.py checks it). Every spin gives up after
// SPIN_LIMIT polls or once another block has, and sets *failed: the benchmark cannot hang.
#ifndef CL
#define CL 16
#endif
#ifndef NC
#define NC 4
#endif
#define NT 256
#define TOTAL 8192
#define BLOCKS (NC * CL)
#define VALUES (TOTAL / BLOCKS)
#define CLUSTER_VALUES (CL * VALUES)   // h a cluster owns, in its blocks' shared memory
#define SPIN_LIMIT (1u << 22)

static_assert(TOTAL % BLOCKS == 0 && VALUES <= NT && TOTAL % NT == 0, "shape");
static_assert(CLUSTER_VALUES % NT == 0, "a cluster owns whole rows of NT values");
static_assert(2 * CLUSTER_VALUES * 4 <= 40 * 1024, "both parities of the cluster's h fit static shared memory");

#include "cluster_common.cuh"
#include "exchange_common.cuh"

__device__ __forceinline__ unsigned smem(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }


extern "C" __global__ void __cluster_dims__(CL, 1, 1) __launch_bounds__(NT)
k_cross(float* h, unsigned* counters, unsigned* failed, float* out, int steps) {
    __shared__ float own[2][CLUSTER_VALUES];              // the cluster's h, by parity of the step
    __shared__ __align__(8) unsigned long long bar[2];    // its mbarriers: all peers' bytes landed
    __shared__ float scratch[NT];
    __shared__ int stop;
    const int rank = (int)cluster_rank(), cluster = blockIdx.x / CL;
    float mine = threadIdx.x < VALUES ? next_value(0.f, blockIdx.x, threadIdx.x) : 0.f;
    if (threadIdx.x == 0) {
        stop = 0;
        for (int i = 0; i < 2; ++i) asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(smem(&bar[i])));
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    cluster_sync();  // every peer's mbarriers exist before the first st.async
    for (int t = 0; t < steps; ++t) {
        const int p = t & 1;
        float* ht = h + p * TOTAL;
        const unsigned mybar = smem(&bar[p]);
        if (threadIdx.x == 0)
            asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;"
                         :: "r"(mybar), "r"(CLUSTER_VALUES * 4) : "memory");
        if (threadIdx.x < VALUES) {
            ht[blockIdx.x * VALUES + threadIdx.x] = mine;  // for the other clusters, through L2
            const unsigned dst_local = smem(&own[p][rank * VALUES + threadIdx.x]);
            for (int r = 0; r < CL; ++r) {                 // for this cluster, into each peer
                unsigned dst, rbar;
                asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(dst) : "r"(dst_local), "r"(r));
                asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(rbar) : "r"(mybar), "r"(r));
                asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%0], %1, [%2];"
                             :: "r"(dst), "r"(__float_as_uint(mine)), "r"(rbar) : "memory");
            }
        }
        __syncthreads();  // the block's global stores are issued
        if (threadIdx.x == 0) {
            __threadfence();
            asm volatile("red.release.gpu.global.add.u32 [%0], 1;" :: "l"(counters + cluster) : "memory");
        }
        // Thread c < NC (not this cluster) waits for cluster c's blocks of this step.
        if (threadIdx.x < NC && threadIdx.x != cluster) {
            unsigned spins = 0, f;
            do {
                asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(f) : "l"(counters + threadIdx.x) : "memory");
                if (give_up(spins, failed)) { stop = 1; break; }
            } while (f < (unsigned)((t + 1) * CL));
        }
        {   // this cluster's values of the step: the mbarrier's phase of parity (t / 2) & 1
            unsigned done = 0, spins = 0;
            while (!done) {
                asm volatile("{ .reg .pred P; mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 P, [%1], %2; "
                             "selp.u32 %0, 1, 0, P; }" : "=r"(done) : "r"(mybar), "r"((t >> 1) & 1) : "memory");
                if (!done && give_up(spins, failed)) { stop = 1; break; }
            }
        }
        __syncthreads();
        if (stop) break;  // leaves the loop, not the kernel: the cluster's last barrier below
        // Unrolled with the owner of each k known at compile time, so that all the loads of
        // the other clusters' values are in flight at once, as k_flags' are; a loop whose
        // owner is computed per element serialises them (4.0-4.6 us a step, against 3.0).
        float values[TOTAL / NT];
#pragma unroll
        for (int k = 0; k < TOTAL / NT; ++k) {
            constexpr int per_cluster = CLUSTER_VALUES / NT;
            values[k] = k / per_cluster == cluster ? own[p][(k % per_cluster) * NT + threadIdx.x]
                                                   : __ldcg(ht + k * NT + threadIdx.x);
        }
        float partial = 0.f;
#pragma unroll
        for (int k = 0; k < TOTAL / NT; ++k) partial += values[k];
        const float s = block_sum(partial, scratch);
        if (threadIdx.x < VALUES) mine = next_value(s, blockIdx.x, threadIdx.x);
    }
    cluster_sync();  // no block leaves while a peer may still st.async into it
    if (threadIdx.x < VALUES && !stop) out[blockIdx.x * VALUES + threadIdx.x] = mine;
}

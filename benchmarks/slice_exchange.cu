// The floor of a step's all-to-all slice exchange in a cluster of CL blocks, as the backward
// recurrence's cluster kernel runs it (backward_cluster.cu.j2: each block's dG slice of
// SLICE bytes to every peer, double-buffered, each block waiting on its own mbarrier), and
// other ways to move the same bytes. benchmarks/slice_exchange.py times them.
//
// Each step a block writes its slice into its next buffer (every 16-byte chunk a function of
// a chunk the peer after it sent the step before, so the steps chain across blocks), the
// slice reaches every peer's next buffer, and the block waits until every peer's is in.
// MODE:
//   0 bulk: CL − 1 threads, one cp.async.bulk of the slice a peer (what the kernel does)
//   1 bulk in parts: PARTS · (CL − 1) threads, a part of the slice each
//   2 st.async: every thread sends 16-byte chunks of the slice (read back from its buffer)
//   3 mixed: the first half of the peers by bulk copies, the rest by st.async
//   4 pull: a cluster barrier, then each block copies the peers' slices from their buffers
//   5 multicast: the slice written to global memory too, then one cp.async.bulk from there
//     to every peer at once (.multicast::cluster)
//   6 none: no exchange (the block's own slice, a block barrier): the floor of the rest
#include <cooperative_groups.h>
#include <cstdint>
#include "cluster_common.cuh"
namespace cg = cooperative_groups;
#ifndef CL
#define CL 16
#endif
#ifndef SLICE
#define SLICE 2048
#endif
#ifndef MODE
#define MODE 0
#endif
#ifndef PARTS
#define PARTS 2
#endif
#define NT 256
constexpr int CHUNKS = SLICE / 16;  // 16-byte chunks of a slice
constexpr int BUFFER = CL * SLICE;  // bytes of a buffer
static_assert(SLICE % (16 * PARTS) == 0 && CHUNKS <= NT, "slice shape");

__device__ __forceinline__ unsigned smem(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }

extern "C" __global__ void __cluster_dims__(CL, 1, 1) __launch_bounds__(NT)
exchange(uint4* out, uint4* scratch, int steps) {
    extern __shared__ __align__(128) unsigned char shared[];
    unsigned char* buf = shared;  // 2 buffers of BUFFER bytes
    unsigned long long* bar = reinterpret_cast<unsigned long long*>(shared + 2 * BUFFER);
    cg::cluster_group c = cg::this_cluster();
    const int rank = (int)c.block_rank(), tid = threadIdx.x;
    for (int i = tid; i < 2 * BUFFER / 16; i += NT) reinterpret_cast<uint4*>(buf)[i] = make_uint4(0, 0, 0, 0);
    if (tid == 0) {
        for (int i = 0; i < 2; ++i) asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(smem(&bar[i])));
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    c.sync();
    const unsigned incoming = (CL - 1) * SLICE;
    const int after = (rank + 1) % CL;
    uint4* const my_scratch = scratch + (size_t)blockIdx.x / CL * 2 * BUFFER / 16;  // [2][CL][CHUNKS] of this cluster
    for (int s = 0; s < steps; ++s) {
        const unsigned char* cur = buf + (s & 1) * BUFFER;
        unsigned char* nxt = buf + ((s + 1) & 1) * BUFFER;
        const unsigned nbar = smem(&bar[(s + 1) & 1]);
        // The block's slice of the next buffer, from the slice the peer after it sent.
        if (tid < CHUNKS) {
            uint4 v = reinterpret_cast<const uint4*>(cur + after * SLICE)[tid];
            v.x = v.x * 3u + (unsigned)s + rank; v.y ^= v.x; v.z += v.y; v.w = v.w * 5u + tid;
            reinterpret_cast<uint4*>(nxt + rank * SLICE)[tid] = v;
#if MODE == 5
            my_scratch[(((s + 1) & 1) * CL + rank) * CHUNKS + tid] = v;
            asm volatile("fence.proxy.async.global;" ::: "memory");
#endif
        }
#if MODE == 6
        __syncthreads();
#elif MODE == 4
        c.sync();  // every slice of the step written (release/acquire at cluster scope)
        for (int e = tid; e < (CL - 1) * CHUNKS; e += NT) {
            const int peer = (rank + 1 + e / CHUNKS) % CL, k = e % CHUNKS;
            uint4* at = reinterpret_cast<uint4*>(nxt + peer * SLICE) + k;
            *at = *c.map_shared_rank(at, peer);
        }
        __syncthreads();
#else
        if (tid == 0)
            asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(nbar), "r"(incoming) : "memory");
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
        __syncthreads();
        const unsigned source = smem(nxt + rank * SLICE);
#if MODE == 0 || MODE == 1 || MODE == 3
        constexpr int PART_COUNT = MODE == 1 ? PARTS : 1;
        constexpr int BULK_PEERS = MODE == 3 ? (CL - 1) / 2 : CL - 1;
        if (tid < BULK_PEERS * PART_COUNT) {
            const int peer = (rank + 1 + tid / PART_COUNT) % CL, part = tid % PART_COUNT;
            const unsigned bytes = SLICE / PART_COUNT, offset = part * bytes;
            asm volatile("cp.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                         :: "r"(peer_address(nxt + rank * SLICE + offset, peer)), "r"(source + offset), "r"(bytes),
                            "r"(peer_address(&bar[(s + 1) & 1], peer))
                         : "memory");
        }
#endif
#if MODE == 2 || MODE == 3
        constexpr int FIRST = MODE == 3 ? (CL - 1) / 2 : 0;
        for (int e = tid; e < (CL - 1 - FIRST) * CHUNKS; e += NT) {
            const int peer = (rank + 1 + FIRST + e / CHUNKS) % CL, k = e % CHUNKS;
            const uint4 v = reinterpret_cast<const uint4*>(nxt + rank * SLICE)[k];
            asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.b32 [%0], {%1, %2, %3, %4}, [%5];"
                         :: "r"(peer_address(nxt + rank * SLICE + 16 * k, peer)), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w),
                            "r"(peer_address(&bar[(s + 1) & 1], peer))
                         : "memory");
        }
#endif
#if MODE == 5
        if (tid == 0) {
            const unsigned short mask = (unsigned short)(((1u << CL) - 1) & ~(1u << rank));
            const uint4* from = my_scratch + (((s + 1) & 1) * CL + rank) * CHUNKS;
            asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster [%0], [%1], %2, [%3], %4;"
                         :: "r"(source), "l"(from), "r"((unsigned)SLICE), "r"(nbar), "h"(mask) : "memory");
        }
#endif
        const unsigned parity = (s >> 1) & 1;
        unsigned done = 0;
        while (!done)
            asm volatile("{ .reg .pred P; mbarrier.try_wait.parity.acquire.cta.shared::cta.b64 P, [%1], %2; selp.u32 %0, 1, 0, P; }"
                         : "=r"(done) : "r"(nbar), "r"(parity) : "memory");
#endif
    }
    c.sync();
    const unsigned char* last = buf + (steps & 1) * BUFFER;
    for (int i = tid; i < BUFFER / 16; i += NT) out[(size_t)blockIdx.x * BUFFER / 16 + i] = reinterpret_cast<const uint4*>(last)[i];
}

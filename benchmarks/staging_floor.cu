// The floor of a tensor grid step's staging of h at B=64 (docs/design-notes.md, "Why cp.async
// did not help at B=64"): BLOCKS_X × BLOCKS_Y co-resident blocks, each step
//   1. stage its batch tile's h, ROWS rows of K halves (16-byte ld.global.cg into registers,
//      then shared memory, four in flight a thread, as tensor_core.cuh.j2's stage_h), from
//      the buffer of the step's parity;
//   2. write its slice of the next h (its UNIT_VECS 16-byte vectors of each of its rows): each
//      32-bit word the sum of the staged word there and one from the other half of the rows
//      and K, so that every block needs every row of its tile;
//   3. meet at a grid barrier (one counter whose top bit flips, as common.cuh.j2's).
// FORM 0 stages the whole tile; FORM 1 only half of its rows (the bytes the pair form reads
// from L2, without the pair: a bound, its h wrong); FORM 2 the pair form of
// benchmarks/variants/stage-h-pairs.patch: blocks x and x ^ 1 in a cluster of 2, each
// reading half of the rows and storing each vector into both blocks' shared memory (DSMEM),
// then a cluster barrier; FORM 3 no staging (the barrier and the writes alone); FORM 4 the
// whole tile by the bulk copy engine (TMA; cp.async.bulk, a row a thread, one mbarrier);
// FORM 5 the pairs by TMA multicast: blocks x and x ^ 1 in a cluster of 2, each copying half
// of the rows into both blocks' shared memory at once (.multicast::cluster), each waiting on
// its own mbarrier for the whole tile, with no cluster barrier a step (the grid barrier
// already orders a step's copies after both blocks' reads of the last step's tile).
// FORMs 0, 2, 4 and 5 compute the same h: benchmarks/staging_floor.py checks it bit for bit.
#include <cstdint>

#include "cluster_common.cuh"

#ifndef FORM
#define FORM 0
#endif
#ifndef ROWS
#define ROWS 32
#endif
#ifndef BLOCKS_X
#define BLOCKS_X 64
#endif
#ifndef BLOCKS_Y
#define BLOCKS_Y 2
#endif
#define K 1024                        // halves of a row
#define CHUNKS (K / 8)                // 16-byte vectors of a row
#define UNIT_VECS (CHUNKS / BLOCKS_X) // vectors of a row a block writes
#define NT 256
#define SPIN_LIMIT (1u << 26)
#define B (ROWS * BLOCKS_Y)

static_assert(CHUNKS % BLOCKS_X == 0 && UNIT_VECS >= 1, "whole vectors a block");
static_assert((FORM != 2 && FORM != 5) || BLOCKS_X % 2 == 0, "pairs along x");
#define BULK (FORM == 4 || FORM == 5)
#define ROW_BYTES (CHUNKS * 16)

__device__ __forceinline__ uint4 load_cg(const uint4* p) {
    uint4 v;
    asm volatile("ld.global.cg.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
    return v;
}

#if BULK
__device__ __forceinline__ unsigned smem_address(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }

// One row of h (ROW_BYTES) from global into this block's shared memory, or (multicast) into
// the same place in both blocks of the pair; the bytes counted on the mbarrier at the same
// place in each block that receives them.
__device__ __forceinline__ void copy_row(void* dst, const void* src, unsigned long long* bar) {
#if FORM == 4
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                 :: "r"(smem_address(dst)), "l"(src), "r"(ROW_BYTES), "r"(smem_address(bar)) : "memory");
#else
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
                 " [%0], [%1], %2, [%3], %4;"
                 :: "r"(smem_address(dst)), "l"(src), "r"(ROW_BYTES), "r"(smem_address(bar)),
                    "h"((unsigned short)0x3) : "memory");
#endif
}

// Waits for the mbarrier's phase of this parity; false when the spin gave up.
__device__ __forceinline__ bool wait_phase(unsigned long long* bar, unsigned parity, unsigned* failed) {
    unsigned done = 0, spins = 0;
    do {
        asm volatile("{\n\t.reg .pred p;\n\tmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\t"
                     "selp.u32 %0, 1, 0, p;\n\t}" : "=r"(done) : "r"(smem_address(bar)), "r"(parity) : "memory");
        if (!done && (++spins > SPIN_LIMIT || ((spins & 1023u) == 0 && *(volatile unsigned*)failed))) {
            atomicExch(failed, 1u);
            return false;
        }
    } while (!done);
    return true;
}
#endif

// Returns false when the spin gave up (then *failed is set, and the others give up too).
__device__ bool grid_barrier(unsigned* barrier, unsigned* failed) {
    __shared__ int stop;
    __syncthreads();
    if (threadIdx.x == NT - 1) {
        stop = 0;
        const unsigned blocks = gridDim.x * gridDim.y;
        const unsigned add = blockIdx.x == 0 && blockIdx.y == 0 ? 0x80000000u - (blocks - 1) : 1u;
        unsigned before, now, spins = 0;
        asm volatile("atom.add.release.gpu.global.u32 %0, [%1], %2;" : "=r"(before) : "l"(barrier), "r"(add) : "memory");
        do {
            asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(now) : "l"(barrier) : "memory");
            if (((before ^ now) & 0x80000000u) != 0) break;
            if (++spins > SPIN_LIMIT || ((spins & 1023u) == 0 && *(volatile unsigned*)failed)) {
                atomicExch(failed, 1u);
                stop = 1;
                break;
            }
        } while (true);
    }
    __syncthreads();
    return stop == 0;
}

// h: [2][B][CHUNKS] by parity; barrier, failed: one word each, zero before the launch.
extern "C" __global__ void
#if FORM == 2 || FORM == 5
__cluster_dims__(2, 1, 1)
#endif
__launch_bounds__(NT, 1) k_staging(uint4* h, unsigned* barrier, unsigned* failed, int steps) {
    extern __shared__ uint4 shared_tile[];  // [ROWS][CHUNKS]: 64 KiB at ROWS = 32 (the launch opts in)
    uint4 (*tile)[CHUNKS] = reinterpret_cast<uint4 (*)[CHUNKS]>(shared_tile);
    const int tid = threadIdx.x, b0 = blockIdx.y * ROWS, x = blockIdx.x;
#if FORM == 2
    const unsigned rank = cluster_rank(), peer = rank ^ 1u;
    __shared__ unsigned peer_stopped;
    if (tid == 0) peer_stopped = 0u;
    cluster_sync();
#endif
#if BULK
    __shared__ alignas(8) unsigned long long full;  // the step's tile has landed
    if (tid == 0) {
        asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(smem_address(&full)) : "memory");
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
#if FORM == 5
    cluster_sync();  // the peer's mbarrier initialised before the first multicast into it
#else
    __syncthreads();
#endif
#endif
    for (int t = 0; t < steps; ++t) {
        const uint4* src = h + (size_t)(t & 1) * B * CHUNKS + (size_t)b0 * CHUNKS;
        uint4* dst = h + (size_t)((t + 1) & 1) * B * CHUNKS;
#if FORM == 3
        (void)src;
        (void)tile;
#elif FORM == 0
#pragma unroll 4
        for (int e = tid; e < ROWS * CHUNKS; e += NT) tile[e / CHUNKS][e % CHUNKS] = load_cg(src + e);
        __syncthreads();
#elif FORM == 1
#pragma unroll 4
        for (int e = tid; e < ROWS / 2 * CHUNKS; e += NT) tile[e / CHUNKS][e % CHUNKS] = load_cg(src + e);
        __syncthreads();
#elif FORM == 2
        const int first = (int)rank * (ROWS / 2) * CHUNKS;
#pragma unroll 4
        for (int e = tid; e < ROWS / 2 * CHUNKS; e += NT) {
            const uint4 v = load_cg(src + first + e);
            uint4* at = &tile[(first + e) / CHUNKS][(first + e) % CHUNKS];
            *at = v;
            store_peer_16(at, peer, v);
        }
        cluster_sync();
        if (peer_stopped) return;
#elif BULK
        if (tid == 0)
            asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;"
                         :: "r"(smem_address(&full)), "r"(ROWS * ROW_BYTES) : "memory");
#if FORM == 4
        if (tid < ROWS) {
            // The other blocks' h, written by generic stores before the grid barrier, read
            // here through the async proxy.
            asm volatile("fence.proxy.async.global;" ::: "memory");
            copy_row(tile[tid], src + (size_t)tid * CHUNKS, &full);
        }
#else
        if (tid < ROWS / 2) {
            const int row = (int)cluster_rank() * (ROWS / 2) + tid;
            asm volatile("fence.proxy.async.global;" ::: "memory");
            copy_row(tile[row], src + (size_t)row * CHUNKS, &full);
        }
#endif
        if (!wait_phase(&full, (unsigned)t & 1u, failed)) return;
#endif
        // This block's slice of the next h, from its own rows and the other half's.
        for (int e = tid; e < ROWS * UNIT_VECS; e += NT) {
            const int row = e / UNIT_VECS, c = x * UNIT_VECS + e % UNIT_VECS;
#if FORM == 3
            const uint4 a = make_uint4(t, row, c, 1), o = a;
#else
            const uint4 a = tile[row][c], o = tile[(row + ROWS / 2) % ROWS][(c + CHUNKS / 2) % CHUNKS];
#endif
            dst[(size_t)(b0 + row) * CHUNKS + c] = make_uint4(a.x + o.y, a.y + o.z, a.z + o.w, a.w + o.x);
        }
        if (t + 1 < steps && !grid_barrier(barrier, failed)) {
#if FORM == 2
            if (tid == 0) store_peer_u32(&peer_stopped, peer, 1u);
            cluster_sync();
#endif
            return;
        }
    }
#if FORM == 2 || FORM == 5
    cluster_sync();
#endif
}

// A prototype of the K-split backward step (issue 17; docs/design-notes.md, "The float32
// backward in clusters", Next): what one step of the backward recurrence's product costs
// for LSTM fp32 H=1024 at B=64 when the Q blocks of a cluster split K = G·H between them,
// instead of every block reading all of dG (the grid form: 1 MiB a block a step, 31 µs a
// step measured). Not rnncc's kernel: no cell, no grid barrier; every step reads the same
// dG from L2 (cp.async.cg, past L1), as the real step reads the one the grid wrote.
//
// Cluster c owns UC = Q·U units; its block q holds W[k][u] for its K rows
// [q·KQ, (q+1)·KQ) and the cluster's units (KQ·UC floats: 128 KiB whatever Q), and each step
//   1. stages dG[B rows][its K rows] chunk by chunk into shared memory (cp.async, two buffers);
//   2. sums P_q[b][u] = Σ_k dG[b][k]·W[k][u]: warp w the k of its share of each chunk, lane
//      (row group rg, unit group ug) rows rg + 8r (r < 8) and units ug·C .. ug·C + C;
//   3. adds the warps' tiles in shared memory (the stage buffers reused);
//   4. after a cluster barrier, each block adds the Q blocks' sums of its U units over DSMEM
//      and writes them (dh of its units: what its cells would take), then a second barrier.
// -DTMA: dG staged by tensor-map copies (forward_step.cu's -DTMA, which took the forward's
// step from 20.0 to 16.1 µs) instead of cp.async by every thread.
// benchmarks/ksplit_step.py times it and checks its sums against a float64 product.
#include <cooperative_groups.h>

#include "lane_product.cuh"
#include "tma_staging.cuh"
namespace cg = cooperative_groups;

#ifndef Q
#define Q 4
#endif
#ifndef CLUSTERS
#define CLUSTERS 30
#endif
#define GH 4096            // K: LSTM's 4·H at H=1024
#define B 64               // batch rows
#define U 8                // units a block owns
#define UC (U * Q)         // units a cluster: a block's product covers them all
#define C (UC / 4)         // units a lane (4 unit groups)
#define R 8                // rows a lane (8 row groups)
#define KQ (GH / Q)        // K rows a block
#define NT 256
#define WARPS (NT / 32)
#define KC 128             // K rows of a staged chunk
#define CHUNKS (KQ / KC)
#define KW (KC / WARPS)    // K rows of a chunk a warp sums
#ifdef TMA
#define PITCH KC           // dense boxes; the 128-byte swizzle puts row groups on distinct banks
static_assert(KC % 32 == 0, "whole boxes of 32 floats a chunk");
#else
#define PITCH (KC + 4)     // a staged row: 4 floats of padding put row groups on distinct banks
#endif
#define STAGE (B * PITCH)  // floats of a stage buffer

static_assert(KQ % KC == 0 && KC % WARPS == 0 && KW % 4 == 0 && C % 4 == 0, "tile shape");
static_assert(2 * STAGE >= WARPS * B * UC, "the warps' tiles fit the stage buffers");

__device__ __forceinline__ void copy16(float* dst, const float* src) {
    const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" :: "r"(d), "l"(src) : "memory");
}

// dg: [B][GH]; w: [GH][CLUSTERS·UC] (W_hh's columns as the step multiplies them); dh: [B][CLUSTERS·UC]
extern "C" __global__ void __cluster_dims__(Q, 1, 1) __launch_bounds__(NT, 1)
k_ksplit(const float* __restrict__ dg, const float* __restrict__ w, float* __restrict__ dh, int steps,
         const void* tmap) {
    extern __shared__ __align__(16) float smem[];
    float* w_s = smem;                    // [KQ][UC]
    float* stage = w_s + KQ * UC;         // [2][B][PITCH]; then the warps' tiles [WARPS][B][UC]
    float* mine = stage + 2 * STAGE;      // [B][UC] the block's sums, read by its peers (PUSH: [2][Q][B][U] received)
    cg::cluster_group cluster = cg::this_cluster();
    const int q = (int)cluster.block_rank(), cl = blockIdx.x / Q;
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, rg = lane / 4, ug = lane % 4;
    const int width = CLUSTERS * UC;
    for (int i = tid; i < KQ * UC; i += NT) {
        const int k = i / UC, u = i % UC;
        w_s[i] = w[(long long)(q * KQ + k) * width + cl * UC + u];
    }
#ifdef TMA
    // -DTMA: a chunk by KC/32 tensor-map copies (boxes of 32 floats × B rows, 128-byte
    // swizzle) issued by thread 0, an mbarrier a buffer (after the sums' space).
    if (((unsigned)__cvta_generic_to_shared(stage) & 1023u) != 0u) __trap();
    const unsigned bars = (unsigned)__cvta_generic_to_shared(mine + 2 * B * UC);
    if (tid == 0)
        for (int i = 0; i < 2; ++i) asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(bars + 8 * i));
    unsigned phases = 0;  // bit i: the parity buffer i's mbarrier completes next
    __syncthreads();
    auto stage_chunk = [&](int chunk, int buffer) {
        if (tid != 0) return;
        const unsigned bar = bars + 8 * buffer;
        asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(bar), "r"(B * KC * 4) : "memory");
        for (int box = 0; box < KC / 32; ++box) {
            const unsigned dst = (unsigned)__cvta_generic_to_shared(stage + buffer * STAGE + box * B * 32);
            const int x = q * KQ + chunk * KC + box * 32, y = 0;
            asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
                         " [%0], [%1, {%2, %3}], [%4];" :: "r"(dst), "l"(tmap), "r"(x), "r"(y), "r"(bar) : "memory");
        }
    };
    auto wait_chunk = [&](int buffer) {
        mbar_wait(bars + 8 * buffer, phases >> buffer & 1u);
        phases ^= 1u << buffer;
    };
#else
    __syncthreads();
    auto stage_chunk = [&](int chunk, int buffer) {
        for (int i = tid; i < B * KC / 4; i += NT) {
            const int row = i / (KC / 4), col = i % (KC / 4) * 4;
            copy16(stage + buffer * STAGE + row * PITCH + col, dg + (long long)row * GH + q * KQ + chunk * KC + col);
        }
        asm volatile("cp.async.commit_group;" ::: "memory");
    };
#endif
    for (int s = 0; s < steps; ++s) {
        float acc[R][C];
#pragma unroll
        for (int r = 0; r < R; ++r)
#pragma unroll
            for (int c = 0; c < C; ++c) acc[r][c] = 0.0f;
#ifdef TMA
        // the warps' tiles of the step before (generic stores) lie where these copies land
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
        __syncthreads();
        stage_chunk(0, 0);
        for (int chunk = 0; chunk < CHUNKS; ++chunk) {
            if (chunk + 1 < CHUNKS) stage_chunk(chunk + 1, (chunk + 1) & 1);
            wait_chunk(chunk & 1);
            const float* wk = w_s + (chunk * KC + warp * KW) * UC + ug * C;
            lane_product_swizzled<R, C, KW, B, UC>(acc, stage + (chunk & 1) * STAGE, warp * KW, wk, rg);
            __syncthreads();  // the buffer is staged again two chunks on
        }
#else
        stage_chunk(0, 0);
        for (int chunk = 0; chunk < CHUNKS; ++chunk) {
            if (chunk + 1 < CHUNKS) {
                stage_chunk(chunk + 1, (chunk + 1) & 1);
                asm volatile("cp.async.wait_group 1;" ::: "memory");
            } else {
                asm volatile("cp.async.wait_group 0;" ::: "memory");
            }
            __syncthreads();
            const float* d = stage + (chunk & 1) * STAGE + warp * KW;
            const float* wk = w_s + (chunk * KC + warp * KW) * UC + ug * C;
            lane_product<R, C, KW, PITCH, UC>(acc, d, wk, rg);
            __syncthreads();  // the buffer is staged again two chunks on
        }
#endif
        // The warps' tiles, then their sum: mine[row][unit].
#ifndef NO_WARP_SUM
        float* tiles = stage;
#pragma unroll
        for (int r = 0; r < R; ++r)
#pragma unroll
            for (int c = 0; c < C; c += 4)
                *reinterpret_cast<float4*>(tiles + (warp * B + rg + 8 * r) * UC + ug * C + c) =
                    make_float4(acc[r][c], acc[r][c + 1], acc[r][c + 2], acc[r][c + 3]);
        __syncthreads();
#ifdef PUSH
        // Each sum goes straight to the block that owns its unit (a remote store), into the
        // slot of this block in a buffer of the step's parity: one cluster barrier a step.
        float* recv = mine + (s & 1) * Q * B * U;  // [2][Q][B][U]
        for (int i = tid; i < B * UC; i += NT) {
            float sum = 0.0f;
#pragma unroll
            for (int v = 0; v < WARPS; ++v) sum += tiles[v * B * UC + i];
            const int row = i / UC, u = i % UC;
            cluster.map_shared_rank(recv, u / U)[(q * B + row) * U + u % U] = sum;
        }
        cluster.sync();
        for (int i = tid; i < B * U; i += NT) {
            float sum = 0.0f;
#pragma unroll
            for (int p = 0; p < Q; ++p) sum += recv[p * B * U + i];
            dh[(long long)(i / U) * width + cl * UC + q * U + i % U] = sum;
        }
#else
        for (int i = tid; i < B * UC; i += NT) {
            float sum = 0.0f;
#pragma unroll
            for (int v = 0; v < WARPS; ++v) sum += tiles[v * B * UC + i];
            mine[i] = sum;
        }
#ifndef NO_CLUSTER_SUM
        cluster.sync();  // every block's sums complete
        for (int i = tid; i < B * U; i += NT) {
            const int row = i / U, u = q * U + i % U;
            float sum = 0.0f;
#pragma unroll
            for (int p = 0; p < Q; ++p) sum += cluster.map_shared_rank(mine, p)[row * UC + u];
            dh[(long long)row * width + cl * UC + u] = sum;
        }
        cluster.sync();  // no peer reads mine once it is written again
#else
        __syncthreads();
        for (int i = tid; i < B * U; i += NT)
            dh[(long long)(i / U) * width + cl * UC + q * U + i % U] = mine[(i / U) * UC + q * U + i % U];
#endif
#endif
#else
        // Timing only: the accumulators stored so that the product is not removed.
        float all = 0.0f;
#pragma unroll
        for (int r = 0; r < R; ++r)
#pragma unroll
            for (int c = 0; c < C; ++c) all += acc[r][c];
        if (all == 1.2345f) dh[tid] = all;
        __syncthreads();
#endif
    }
}

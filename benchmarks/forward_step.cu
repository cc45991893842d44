// A prototype of a grid-persistent float32 LSTM forward at large batch (issue 17's fp32 row,
// docs/design-notes.md, "The float32 backward with K split across clusters", Next): the
// shape of the K-split backward's product turned to the forward. At H=1024 B=64 the plan
// takes a launch a step (cuBLASLt's h·W_hhᵀ and rnncc's cell, 35.4 µs a step with the
// projection), because rnncc's FMA grid kernel, which stages all of h per batch tile, runs
// 53.9 (results/forward-persistence-lstm1024-b64-h100-2026-11-27.txt). Not rnncc's kernel:
// no bias, no lengths, h0 = c0 = 0, one layer shape.
//
// Block x owns units [x·U, x·U + U): W_hhᵀ's 4·U gate columns (torch's gate order, gate g of
// unit u at column g·U + u) over all K = H rows stay in shared memory. Each step it
//   1. stages h_{t−1} [B rows][K] a chunk of KC rows of K at a time (cp.async.cg, STAGES
//      buffers), warp w summing KC/8 rows of each chunk; lane (row group rg, column group
//      cg) keeps rows rg + 8r (r < R) × columns cg·C .. cg·C + C, C = 4·U / 4;
//   2. adds the warps' tiles in shared memory (the upper half's into the lower's);
//   3. runs the cells of its B × U elements (the projection xp, read before the product),
//      writes h_t into the buffer of the step's parity;
//   4. meets the other blocks at a grid barrier (the blocks are all resident: 128 of them,
//      one an SM).
// -DMULTICAST (STAGES 2): the blocks run in clusters of 2, and each chunk of h is read from
// L2 once a cluster: rank r copies rows [r·B/2, (r+1)·B/2) of the chunk with bulk copies
// multicast into both blocks' buffers (cp.async.bulk … multicast::cluster), and each block
// waits on its buffer's mbarrier for the whole chunk's bytes. Before a buffer is filled
// again, the cluster meets (barrier.cluster, arrived at after the product of the chunk it
// held), since the peer's copies write into this block's buffer too. The GPU reads h 64
// times a step instead of 128 (the forward K split halved it too, but added an exchange of
// sums: 20.0 against 20.9 µs at Q=2 on the H100, design notes). -DBULK: the same bulk
// copies and mbarriers, each block copying all of a chunk itself (no cluster), to tell the
// copies' cost from the multicast's. -DTMA: one tensor-map copy a box of 32 floats × the
// rank's rows (128-byte swizzle) instead of a bulk copy a row; with MULTICAST or alone;
// -DDEVICE_MAP: the map made in the kernel from a template (below).
// benchmarks/forward_step.py times it and checks h against a float64 recurrence. For the
// split of a step, -DNO_STAGE leaves out the staging (the product reads whatever the buffers
// hold), -DNO_PRODUCT the product's FMAs, -DNO_BARRIER the grid barrier (each variant's h is
// wrong; only its time counts).
#include "lane_product.cuh"
#include "tma_staging.cuh"

#ifndef H
#define H 1024
#endif
#ifndef B
#define B 64
#endif
#ifndef U
#define U 8                 // units a block
#endif
#ifndef KC
#define KC 128              // K rows staged a time
#endif
#ifndef STAGES
#define STAGES 2
#endif
#define G 4
#define COLS (G * U)        // a block's gate columns
#define C (COLS / 4)        // columns a lane (4 column groups)
#define R (B / 8)           // rows a lane (8 row groups)
#define NT 256
#define WARPS (NT / 32)
#define HALF (WARPS / 2)
#define KW (KC / WARPS)
#define CHUNKS (H / KC)
#ifdef TMA
#define PITCH KC            // TMA's boxes are dense; the 128-byte swizzle keeps the reads apart
#else
#define PITCH (KC + 4)
#endif
#define STAGE (B * PITCH)
#define TILE (B * COLS)
#define SUMS (STAGES * STAGE > HALF * TILE ? STAGES * STAGE : HALF * TILE)

static_assert(H % KC == 0 && KW % 4 == 0 && C % 4 == 0 && B % 8 == 0, "tile shape");

__device__ __forceinline__ void stage16(float* dst, const float* src) {
    const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" :: "r"(d), "l"(src) : "memory");
}

__device__ __forceinline__ float sigmoid(float v) { return 1.0f / (1.0f + __expf(-v)); }

#if defined(MULTICAST) || defined(BULK) || defined(TMA)
#define BULK_COPIES
#endif
#ifdef BULK_COPIES
static_assert(STAGES == 2 && B % 2 == 0, "two buffers");
#ifdef MULTICAST
__device__ __forceinline__ void cluster_arrive() { asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory"); }
__device__ __forceinline__ void cluster_wait() { asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory"); }
#define ROWS_A_RANK (B / 2)
#else  // BULK: each block copies all rows of a chunk itself; a block barrier before a refill
__device__ __forceinline__ void cluster_arrive() {}
__device__ __forceinline__ void cluster_wait() { __syncthreads(); }
#define ROWS_A_RANK B
#endif
#endif

#ifdef TMA
static_assert(KC % 32 == 0, "whole boxes of 32 floats a chunk");
#endif

// The arrival scheme of rnncc's grid barrier (templates/common.cuh.j2), unbounded.
__device__ __forceinline__ void grid_barrier(unsigned* barrier) {
    __syncthreads();
    if (threadIdx.x == 0) {
        const unsigned add = blockIdx.x == 0 ? 0x80000000u - (gridDim.x - 1) : 1u;
        unsigned before, now;
        asm volatile("atom.add.release.gpu.global.u32 %0, [%1], %2;" : "=r"(before) : "l"(barrier), "r"(add) : "memory");
        do {
            asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(now) : "l"(barrier) : "memory");
        } while (((before ^ now) & 0x80000000u) == 0);
        asm volatile("fence.acq_rel.gpu;" ::: "memory");
    }
    __syncthreads();
}

// w: [H][4·H] W_hhᵀ (column g·H + j: gate g of unit j); xp: [S][B][4·H] the input projection
// (biases in); h: [2][B][H] h of the steps by parity (zeros before the first); barrier: one
// word, zero before the launch.
extern "C" __global__ void __launch_bounds__(NT, 1)
#ifdef MULTICAST
__cluster_dims__(2, 1, 1)
#endif
k_forward(const float* __restrict__ w, const float* __restrict__ xp, float* h, unsigned* barrier, int steps,
          const void* tmap) {
    extern __shared__ __align__(16) float smem[];
    float* w_s = smem;                 // [H][COLS]
    float* sums = w_s + H * COLS;      // [STAGES][STAGE]; after the product [HALF][TILE]
    float* c_s = sums + SUMS;          // [B][U] the cells' c
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32, rg = lane / 4, cg = lane % 4;
    const int u0 = blockIdx.x * U;
#ifdef TMA
    // the 128-byte swizzle repeats every 1024 bytes: the buffers must start on one
    if (((unsigned)__cvta_generic_to_shared(sums) & 1023u) != 0u) __trap();
#endif
#ifdef BULK_COPIES
    // an mbarrier a stage buffer, after c_s (8-byte aligned: B·U floats is even)
    const unsigned bars = (unsigned)__cvta_generic_to_shared(c_s + B * U);
    unsigned rank = 0;
#ifdef MULTICAST
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
#endif
    if (tid == 0) {
        for (int i = 0; i < STAGES; ++i) asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(bars + 8 * i));
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
#ifdef DEVICE_MAP
    // -DDEVICE_MAP (with TMA): `tmap` holds a template map (encoded on the host for another
    // address, other dims and other strides) and a slot of 128 bytes a block after it. Warp
    // 0 copies the template into shared memory, puts h's address, dims and strides into it
    // (tensormap.replace), and copies it to this block's slot with the release the copies'
    // proxy needs; the issuing thread acquires it.
    // So a kernel can make the map of a buffer known only at its launch (y of the call) with
    // no host encoding a call: the address, and as needed the dims and strides, replaced.
    const unsigned map_s = (bars + 8 * STAGES + 127) / 128 * 128;
    unsigned char* slot = (unsigned char*)tmap + 128 * (1 + blockIdx.x);
    if (warp == 0) {
        const unsigned v = reinterpret_cast<const unsigned*>(tmap)[lane];
        asm volatile("st.shared.u32 [%0], %1;" :: "r"(map_s + 4 * lane), "r"(v) : "memory");
        __syncwarp();
        if (lane == 0) {
            asm volatile("tensormap.replace.tile.global_address.shared::cta.b1024.b64 [%0], %1;"
                         :: "r"(map_s), "l"(h) : "memory");
            // h's dims past K and its strides (in bytes; ord i: the stride of dim i + 1), as a
            // kernel whose batch and strides are the call's would put them in (the template
            // was encoded with others)
            asm volatile("tensormap.replace.tile.global_dim.shared::cta.b1024.b32 [%0], 1, %1;" :: "r"(map_s), "r"(B) : "memory");
            asm volatile("tensormap.replace.tile.global_dim.shared::cta.b1024.b32 [%0], 2, %1;" :: "r"(map_s), "r"(2) : "memory");
            asm volatile("tensormap.replace.tile.global_stride.shared::cta.b1024.b64 [%0], 0, %1;"
                         :: "r"(map_s), "l"((unsigned long long)H * 4) : "memory");
            asm volatile("tensormap.replace.tile.global_stride.shared::cta.b1024.b64 [%0], 1, %1;"
                         :: "r"(map_s), "l"((unsigned long long)B * H * 4) : "memory");
        }
        __syncwarp();
        asm volatile("tensormap.cp_fenceproxy.global.shared::cta.tensormap::generic.release.gpu.sync.aligned [%0], [%1], 128;"
                     :: "l"(slot), "r"(map_s) : "memory");
        if (lane == 0) asm volatile("fence.proxy.tensormap::generic.acquire.gpu [%0], 128;" :: "l"(slot) : "memory");
    }
    tmap = slot;
#endif
#ifdef MULTICAST
    cluster_arrive();
    cluster_wait();      // both blocks' barriers initialised before either's copies signal them
#else
    __syncthreads();
#endif
    unsigned phases = 0; // bit i: the parity buffer i's mbarrier completes next
#endif
    for (int i = tid; i < H * COLS; i += NT) {
        const int k = i / COLS, col = i % COLS, g = col / U, u = col % U;
        w_s[i] = w[(long long)k * G * H + g * H + u0 + u];
    }
    for (int i = tid; i < B * U; i += NT) c_s[i] = 0.0f;
    __syncthreads();
    constexpr int CELLS = (B * U + NT - 1) / NT;
    for (int t = 0; t < steps; ++t) {
        const float* h_prev = h + (t & 1 ^ 1) * B * H;
        float* h_out = h + (t & 1) * B * H;
        float xv[CELLS][G];  // this thread's cells' projections, loaded ahead of the product
#pragma unroll
        for (int n = 0; n < CELLS; ++n) {
            const int i = tid + n * NT, b = i / U, j = u0 + i % U;
#pragma unroll
            for (int g = 0; g < G; ++g) xv[n][g] = i < B * U ? xp[((long long)t * B + b) * G * H + g * H + j] : 0.0f;
        }
        float acc[R][C];
#pragma unroll
        for (int r = 0; r < R; ++r)
#pragma unroll
            for (int c = 0; c < C; ++c) acc[r][c] = 0.0f;
        if (t > 0) {
#ifdef BULK_COPIES
            // Lane r of warp 0 copies rows rank·ROWS_A_RANK + r, + 32 … of the chunk (into
            // both blocks' buffer with MULTICAST); lane 0 first tells its own mbarrier the
            // whole chunk's bytes.
            auto stage_chunk = [&](int chunk, int buffer) {
                if (warp == 0 && chunk < CHUNKS) {
                    const unsigned bar = bars + 8 * buffer;
                    if (lane == 0)
                        asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;"
                                     :: "r"(bar), "r"(B * KC * 4) : "memory");
#ifdef TMA
                    // 3-D map of h [2][B][H]: boxes of 32 floats × ROWS_A_RANK rows × 1, a box a
                    // 32 floats of the chunk, at [box][row][32] in the buffer.
                    if (lane == 0)
                        for (int box = 0; box < KC / 32; ++box) {
                            const unsigned dst = (unsigned)__cvta_generic_to_shared(
                                sums + buffer * STAGE + (box * B + rank * ROWS_A_RANK) * 32);
                            const int x = chunk * KC + box * 32, y = rank * ROWS_A_RANK, z = t & 1 ^ 1;
#ifdef MULTICAST
                            asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes"
                                         ".multicast::cluster [%0], [%1, {%2, %3, %4}], [%5], %6;"
                                         :: "r"(dst), "l"(tmap), "r"(x), "r"(y), "r"(z), "r"(bar), "h"((unsigned short)3)
                                         : "memory");
#else
                            asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes"
                                         " [%0], [%1, {%2, %3, %4}], [%5];"
                                         :: "r"(dst), "l"(tmap), "r"(x), "r"(y), "r"(z), "r"(bar) : "memory");
#endif
                        }
#else
                    for (int r = lane; r < ROWS_A_RANK; r += 32) {
                        const int row = rank * ROWS_A_RANK + r;
                        const unsigned dst = (unsigned)__cvta_generic_to_shared(sums + buffer * STAGE + row * PITCH);
                        const float* src = h_prev + (long long)row * H + chunk * KC;
#ifdef MULTICAST
                        asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
                                     " [%0], [%1], %2, [%3], %4;"
                                     :: "r"(dst), "l"(src), "r"(KC * 4), "r"(bar), "h"((unsigned short)3) : "memory");
#else
                        asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                                     :: "r"(dst), "l"(src), "r"(KC * 4), "r"(bar) : "memory");
#endif
                    }
#endif
                }
            };
            if (warp == 0) asm volatile("fence.proxy.async.global;" ::: "memory");  // h_{t−1}, stored by all blocks
#ifndef NO_STAGE
            stage_chunk(0, 0);
#endif
            for (int chunk = 0; chunk < CHUNKS; ++chunk) {
                const int buffer = chunk % STAGES;
#ifndef NO_STAGE
                mbar_wait(bars + 8 * buffer, phases >> buffer & 1u);
#endif
                phases ^= 1u << buffer;
                if (chunk + 1 < CHUNKS) {
                    if (chunk >= 1) cluster_wait();  // chunk − 1's buffer, filled next, read by all (and the peer)
#ifndef NO_STAGE
                    stage_chunk(chunk + 1, (chunk + 1) % STAGES);
#endif
                }
#ifndef NO_PRODUCT
                const float* wk = w_s + (chunk * KC + warp * KW) * COLS + cg * C;
#ifdef TMA
                lane_product_swizzled<R, C, KW, B, COLS>(acc, sums + buffer * STAGE, warp * KW, wk, rg);
#else
                const float* dk = sums + buffer * STAGE + warp * KW;
                lane_product<R, C, KW, PITCH, COLS>(acc, dk, wk, rg);
#endif
#endif
                if (chunk + 2 < CHUNKS) cluster_arrive();  // this buffer read: the peer may fill it
            }
            __syncthreads();
#else
            auto stage_chunk = [&](int chunk, int buffer) {
                for (int i = chunk < CHUNKS ? tid : B * KC / 4; i < B * KC / 4; i += NT) {
                    const int row = i / (KC / 4), col = i % (KC / 4) * 4;
                    stage16(sums + buffer * STAGE + row * PITCH + col, h_prev + (long long)row * H + chunk * KC + col);
                }
                asm volatile("cp.async.commit_group;" ::: "memory");
            };
#ifndef NO_STAGE
#pragma unroll
            for (int c = 0; c < STAGES - 1; ++c) stage_chunk(c, c);
#endif
            for (int chunk = 0; chunk < CHUNKS; ++chunk) {
                asm volatile("cp.async.wait_group %0;" :: "n"(STAGES - 2) : "memory");
                __syncthreads();
#ifndef NO_STAGE
                stage_chunk(chunk + STAGES - 1, (chunk + STAGES - 1) % STAGES);
#endif
#ifdef NO_PRODUCT
                continue;
#endif
                const float* dk = sums + (chunk % STAGES) * STAGE + warp * KW;
                const float* wk = w_s + (chunk * KC + warp * KW) * COLS + cg * C;
                lane_product<R, C, KW, PITCH, COLS>(acc, dk, wk, rg);
            }
            __syncthreads();
#endif
        }
        // The warps' sums (zeros at t = 0, where h_{-1} = 0).
        if (warp >= HALF) {
#pragma unroll
            for (int r = 0; r < R; ++r)
#pragma unroll
                for (int c = 0; c < C; ++c) sums[(warp - HALF) * TILE + (rg + 8 * r) * COLS + cg * C + c] = acc[r][c];
        }
        __syncthreads();
        if (warp < HALF) {
#pragma unroll
            for (int r = 0; r < R; ++r)
#pragma unroll
                for (int c = 0; c < C; ++c) sums[warp * TILE + (rg + 8 * r) * COLS + cg * C + c] += acc[r][c];
        }
        __syncthreads();
#pragma unroll
        for (int n = 0; n < CELLS; ++n) {
            const int i = tid + n * NT, b = i / U, u = i % U;
            if (i >= B * U) continue;
            float gate[G];
#pragma unroll
            for (int g = 0; g < G; ++g) {
                float v = xv[n][g];
#pragma unroll
                for (int p = 0; p < HALF; ++p) v += sums[p * TILE + b * COLS + g * U + u];
                gate[g] = v;
            }
            const float c = sigmoid(gate[1]) * c_s[i] + sigmoid(gate[0]) * tanhf(gate[2]);
            c_s[i] = c;
            h_out[(long long)b * H + u0 + u] = sigmoid(gate[3]) * tanhf(c);
        }
#ifdef BULK_COPIES
        // the sums written here (generic stores) are where the next step's copies land
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
#endif
#ifndef NO_BARRIER
        if (t + 1 < steps) grid_barrier(barrier);
#else
        __syncthreads();
#endif
    }
}

// A prototype of a grid-persistent float32 LSTM forward with K split across a thread-block
// cluster (issue 17's fp32 row; docs/design-notes.md, "The float32 forward with h staged by
// chunks", Next). rnncc's staged grid kernel (recurrent_persistent_staged.cu.j2) runs LSTM
// H=1024 B=64 at 19.6 µs a step, and every one of its 128 blocks reads all of h a step
// (256 KiB; 32 MiB over the GPU, ~6 µs of L2 bandwidth). Here the Q blocks of a cluster split
// K = H between them, as the K-split backward does (backward_ksplit.cu.j2): each reads a
// Q-th of h, and the partial sums meet in their owner's shared memory over DSMEM.
// Not rnncc's kernel: no bias, no lengths, h0 = c0 = 0, LSTM only.
//
// Cluster c owns UC = Q·U units. Block rank q owns units q·U .. q·U + U of them (runs their
// cells) and keeps W_hhᵀ[k][the cluster's gate columns] for its K rows [q·KQ, (q+1)·KQ):
// KQ·G·UC floats, the same as the staged kernel's block of U units over all of K. Each step
//   1. loads its cells' projections (xp), then stages h_{t−1} [B rows][its KQ rows] KC rows
//      of K at a time (cp.async.cg, STAGES buffers);
//   2. sums them: warp (wk, wc) takes KW = KC/WK rows of each chunk for its column group
//      wc (4·C columns); lane (row group rg, column group cg) keeps rows rg + 8r × C columns;
//   3. adds the K groups' tiles in shared memory (the upper half's into the lower half's);
//   4. stores each of the cluster's B × G·UC partial sums into the receive buffer of the
//      block that owns its unit (DSMEM), then a cluster barrier;
//   5. runs the cells of its B × U elements from the Q partial sums, writes h_t;
//   6. meets the other blocks at a grid barrier (bounded: forward_common.cuh).
// One receive buffer is enough: a peer's sends of step t+1 come after the grid barrier of
// step t, which this block reaches only after its cells of step t read the buffer.
// benchmarks/forward_ksplit.py times it and checks h against a float64 recurrence. For the
// split of a step, -DNO_STAGE leaves out the staging, -DNO_PRODUCT the product's FMAs,
// -DNO_EXCHANGE the DSMEM stores and the cluster barrier, -DNO_BARRIER the grid barrier
// (each variant's h is wrong; only its time counts).
#include <cooperative_groups.h>

#include "forward_common.cuh"
#include "lane_product.cuh"
namespace cg = cooperative_groups;

#ifndef H
#define H 1024
#endif
#ifndef Q
#define Q 2                 // blocks of a cluster, each a range of K
#endif
#ifndef UNITS
#define UNITS 8             // units a block owns (U: -DU would clash with the CUDA headers)
#endif
#define U UNITS
#ifndef KC
#define KC 128              // K rows staged a time
#endif
#ifndef STAGES
#define STAGES 2
#endif
#define B 64
#define G 4
#define UC (Q * U)          // units of a cluster
#define COLS (G * UC)       // the cluster's gate columns: unit uc's gate g at uc·G + g
#define OWN (G * U)         // a block's own gate columns (its units' sums, received)
#define C 8                 // columns a lane sums
#define WC (COLS / (4 * C)) // warps along the columns (4 column groups of C a warp)
#define NT 256
#define WARPS (NT / 32)
#define WK (WARPS / WC)     // warps along K
#define HALF (WK / 2)       // K groups whose sums the other half adds in
#define KQ (H / Q)          // K rows a block
#define CHUNKS (KQ / KC)
#define KW (KC / WK)        // K rows of a chunk a warp sums
#define R (B / 8)           // rows a lane
#define PITCH (KC + 4)      // a staged row: the row groups' float4s on distinct banks
#define STAGE (B * PITCH)
#define TILE (B * COLS)     // floats of one K group's sums
#define SUMS (STAGES * STAGE > HALF * TILE ? STAGES * STAGE : HALF * TILE)
#define CELLS ((B * U + NT - 1) / NT)
#define SHARED_FLOATS (KQ * COLS + SUMS + Q * B * OWN + B * U)

static_assert(H % Q == 0 && KQ % KC == 0 && KW % 4 == 0 && COLS % (4 * C) == 0, "tile shape");
static_assert(WARPS % WC == 0 && WK >= 2 && WK % 2 == 0, "warps along K: an even number, at least 2");

// w: [H][4·H] W_hhᵀ (column g·H + j: gate g of unit j); xp: [S][B][4·H] the input projection
// (biases in); h: [2][B][H] h of the steps by parity; barrier: one word, zero before the
// launch; status: one word, set when a grid barrier gave up.
extern "C" __global__ void __cluster_dims__(Q, 1, 1) __launch_bounds__(NT, 1)
k_forward_ksplit(const float* __restrict__ w, const float* __restrict__ xp, float* h, unsigned* barrier,
                 unsigned* status, int steps) {
    extern __shared__ __align__(16) float smem[];
    float* w_s = smem;                  // [KQ][COLS]
    float* sums = w_s + KQ * COLS;      // [STAGES][STAGE] h staged; after the product [HALF][TILE]
    float* recv = sums + SUMS;          // [Q][B][OWN] the peers' partial sums of this block's units
    float* c_s = recv + Q * B * OWN;    // [B][U] the cells' c
    cg::cluster_group cluster = cg::this_cluster();
    const int q = (int)cluster.block_rank();
    const int uc0 = blockIdx.x / Q * UC, u0 = uc0 + q * U, k0 = q * KQ;
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32, rg = lane / 4, cg_ = lane % 4;
    const int wc = warp % WC, wk = warp / WC;
    for (int i = tid; i < KQ * COLS; i += NT) {
        const int k = i / COLS, col = i % COLS, uc = col / G, g = col % G;
        w_s[i] = w[(long long)(k0 + k) * G * H + g * H + uc0 + uc];
    }
    for (int i = tid; i < B * U; i += NT) c_s[i] = 0.0f;
    __syncthreads();
    for (int t = 0; t < steps; ++t) {
        const float* h_prev = h + (t & 1 ^ 1) * B * H;
        float* h_out = h + (t & 1) * B * H;
        float xv[CELLS][G];
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
            auto stage_chunk = [&](int chunk, int buffer) {  // a group, empty past the last chunk
#ifndef NO_STAGE
                for (int i = chunk < CHUNKS ? tid : B * KC / 4; i < B * KC / 4; i += NT) {
                    const int row = i / (KC / 4), col = i % (KC / 4) * 4;
                    stage16(sums + buffer * STAGE + row * PITCH + col, h_prev + (long long)row * H + k0 + chunk * KC + col);
                }
#endif
                asm volatile("cp.async.commit_group;" ::: "memory");
            };
#pragma unroll
            for (int s = 0; s < STAGES - 1; ++s) stage_chunk(s, s);
            for (int chunk = 0; chunk < CHUNKS; ++chunk) {
                asm volatile("cp.async.wait_group %0;" :: "n"(STAGES - 2) : "memory");
                __syncthreads();
                stage_chunk(chunk + STAGES - 1, (chunk + STAGES - 1) % STAGES);
#ifndef NO_PRODUCT
                const float* hk = sums + (chunk % STAGES) * STAGE + wk * KW;
                const float* wk_s = w_s + (chunk * KC + wk * KW) * COLS + wc * 4 * C + cg_ * C;
                lane_product<R, C, KW, PITCH, COLS>(acc, hk, wk_s, rg);
#endif
            }
        }
        __syncthreads();  // every warp's last chunk summed: the buffers hold the sums next
        // The K groups' sums: the upper half stores its tiles, the lower half adds its own.
        if (wk >= HALF) {
#pragma unroll
            for (int r = 0; r < R; ++r)
#pragma unroll
                for (int c = 0; c < C; ++c) sums[(wk - HALF) * TILE + (rg + 8 * r) * COLS + wc * 4 * C + cg_ * C + c] = acc[r][c];
        }
        __syncthreads();
        if (wk < HALF) {
#pragma unroll
            for (int r = 0; r < R; ++r)
#pragma unroll
                for (int c = 0; c < C; ++c) sums[wk * TILE + (rg + 8 * r) * COLS + wc * 4 * C + cg_ * C + c] += acc[r][c];
        }
        __syncthreads();
        // Each of the cluster's partial sums to the block that owns its unit.
#ifndef NO_EXCHANGE
        for (int i = tid; i < B * COLS; i += NT) {
            const int row = i / COLS, col = i % COLS;
            float sum = 0.0f;
#pragma unroll
            for (int p = 0; p < HALF; ++p) sum += sums[p * TILE + i];
            cluster.map_shared_rank(recv, col / OWN)[(q * B + row) * OWN + col % OWN] = sum;
        }
        cluster.sync();  // every peer's sums of this step received
#endif
#pragma unroll
        for (int n = 0; n < CELLS; ++n) {
            const int i = tid + n * NT, b = i / U, j = i % U;
            if (i >= B * U) continue;
            float gate[G];
#pragma unroll
            for (int g = 0; g < G; ++g) {
                float v = xv[n][g];
#pragma unroll
                for (int p = 0; p < Q; ++p) v += recv[(p * B + b) * OWN + j * G + g];
                gate[g] = v;
            }
            const float c = sigmoid(gate[1]) * c_s[i] + sigmoid(gate[0]) * tanhf(gate[2]);
            c_s[i] = c;
            h_out[(long long)b * H + u0 + j] = sigmoid(gate[3]) * tanhf(c);
        }
#ifndef NO_BARRIER
        if (t + 1 < steps) grid_barrier(barrier, status);
#else
        __syncthreads();
#endif
    }
}

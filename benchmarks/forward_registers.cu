// A prototype of a grid-persistent float32 LSTM forward at small batches with W_hhᵀ held in
// registers (issue 14's fp32 rows: LSTM H=1024 B=8 runs 8.0 µs a step in rnncc's FMA grid
// kernel, recurrent_persistent.cu.j2, where 5× cuDNN needs ~3.6). That kernel reads both
// operands of its product from shared memory and stages h through transposing stores; here
// lane l of every warp owns gate column l of the block (unit l / 4, gate l % 4) and warp w
// owns K rows [w·KW, (w+1)·KW): its KW weights of that column stay in registers for the
// whole sequence, and h's values come from shared memory as float4 broadcasts (every lane
// of a warp reads the same 16 bytes). Each warp stages only its own K rows of h, so the
// staging needs no block barrier. Not rnncc's kernel: no bias, no lengths, h0 = c0 = 0,
// LSTM only, 8 units a block (32 gate columns, one a lane).
//
// A step:
//   1. a cell thread loads its projections (xp) for the step;
//   2. warp w stages h_{t−1}[B rows][its KW rows] by cp.async.cg and waits for its own copies;
//   3. lane l sums acc[b] = Σ_k h[b][k] · W_hhᵀ[k][l] over the warp's rows;
//   4. the warps' sums meet in shared memory ([warp][b][column]); thread (b, column) adds
//      them, and the 4 gates of a unit meet in the lane of gate 0 by shuffles;
//   5. that lane runs the cell (c in a register), writes h_t;
//   6. grid barrier (bounded, as forward_ksplit.cu's).
// benchmarks/forward_registers.py times it and checks h against a float64 recurrence.
// -DNO_STAGE, -DNO_PRODUCT, -DNO_BARRIER leave a part out (h then wrong; only time counts).
#include "forward_common.cuh"

#ifndef H
#define H 1024
#endif
#ifndef B
#define B 8
#endif
#ifndef NT
#define NT 512
#endif
#define G 4
#define U 8                 // units a block: G·U = 32 gate columns, a lane each
#define WARPS (NT / 32)     // warps along K
#define KW (H / WARPS)      // K rows a warp
#define CELL_THREADS (B * 32)
#define SHARED_BYTES (4 * (B * H + WARPS * B * 32))

static_assert(G * U == 32, "a lane a gate column");
static_assert(H % WARPS == 0 && KW % 4 == 0, "whole float4s of K a warp");
static_assert(CELL_THREADS <= NT, "a thread a (row, column) sum");

// w: [H][4·H] W_hhᵀ (column g·H + j: gate g of unit j); xp: [S][B][4·H]; h: [2][B][H] by the
// step's parity; barrier, status: one word each, zero before the launch.
extern "C" __global__ void __launch_bounds__(NT, 1)
k_forward_registers(const float* __restrict__ w, const float* __restrict__ xp, float* h, unsigned* barrier,
                    unsigned* status, int steps) {
    extern __shared__ __align__(16) float smem[];
    float (*h_s)[H] = reinterpret_cast<float (*)[H]>(smem);                  // [B][H] h_{t−1}; warp w its K rows
    float (*part)[B][32] = reinterpret_cast<float (*)[B][32]>(smem + B * H);  // [WARPS][B][32] the warps' sums
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const int u0 = blockIdx.x * U, k0 = warp * KW;
    const int unit = lane / G, gate = lane % G;
    float w_r[KW];
#pragma unroll
    for (int k = 0; k < KW; ++k) w_r[k] = w[(long long)(k0 + k) * G * H + gate * H + u0 + unit];
    // Cell threads: tid < B·32, row b = tid / 32, column lane; the unit's gate-0 lane runs it.
    const int b = tid / 32;
    const bool cell = tid < CELL_THREADS && gate == 0;
    float c = 0.0f;
    for (int t = 0; t < steps; ++t) {
        const float* h_prev = h + (t & 1 ^ 1) * B * H;
        float* h_out = h + (t & 1) * B * H;
        float xv = 0.0f;  // this (row, column)'s projection
        if (tid < CELL_THREADS) xv = xp[((long long)t * B + b) * G * H + gate * H + u0 + unit];
        float acc[B];
#pragma unroll
        for (int r = 0; r < B; ++r) acc[r] = 0.0f;
        if (t > 0) {
#ifndef NO_STAGE
            for (int i = lane; i < B * KW / 4; i += 32) {
                const int r = i / (KW / 4), col = k0 + i % (KW / 4) * 4;
                stage16(&h_s[r][col], h_prev + (long long)r * H + col);
            }
            asm volatile("cp.async.commit_group;\ncp.async.wait_group 0;" ::: "memory");
            __syncwarp();
#endif
#ifndef NO_PRODUCT
#pragma unroll
            for (int kk = 0; kk < KW; kk += 4) {
#pragma unroll
                for (int r = 0; r < B; ++r) {
                    const float4 v = *reinterpret_cast<const float4*>(&h_s[r][k0 + kk]);
                    acc[r] += v.x * w_r[kk] + v.y * w_r[kk + 1] + v.z * w_r[kk + 2] + v.w * w_r[kk + 3];
                }
            }
#else
#pragma unroll
            for (int r = 0; r < B; ++r) acc[r] = h_s[r][k0 + lane] * w_r[lane % KW];
#endif
        }
#pragma unroll
        for (int r = 0; r < B; ++r) part[warp][r][lane] = acc[r];
        __syncthreads();
        if (tid < CELL_THREADS) {
            float v = xv;
#pragma unroll
            for (int p = 0; p < WARPS; ++p) v += part[p][b][lane];
            const float gi = v, gf = __shfl_down_sync(0xffffffffu, v, 1), gg = __shfl_down_sync(0xffffffffu, v, 2),
                        go = __shfl_down_sync(0xffffffffu, v, 3);
            if (cell) {
                c = sigmoid(gf) * c + sigmoid(gi) * tanhf(gg);
                h_out[(long long)b * H + u0 + unit] = sigmoid(go) * tanhf(c);
            }
        }
#ifndef NO_BARRIER
        if (t + 1 < steps) grid_barrier(barrier, status);
#else
        __syncthreads();
#endif
    }
}

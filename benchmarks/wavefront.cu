// A prototype of issue 15's wavefront for float32 stacks at small batches: every layer of a
// stack runs its whole sequence in one launch, all layers at once, each on its own SMs, and
// layer l + 1 follows layer l a few steps behind through a progress word instead of
// chunks. rnncc's pipelined schedule (passes/schedule.py) relaunches each layer every chunk
// and runs layer l + 1's input projection as a GEMM between chunks; on an H100 whose SMs the
// four layers' grid kernels hold, that GEMM waits for SMs (4 × LSTM fp32 H=512 B=8: 2.06 ms
// in a graph at 75f3b67, bench-h100-2026-11-27.json).
//
// One kernel a layer, the registers form of rnncc's FMA grid kernel
// (templates/recurrent_persistent_staged.cu.j2 with registers=True) cut down: W_hhᵀ in
// registers (warp w owns K rows [w·KW, (w+1)·KW), lane l gate columns l·C .. l·C + C − 1
// of the block's UNITS units × 4 gates, unit-interleaved), h staged by each warp for its own
// rows, the warps' sums meeting in shared memory, one cell a thread (row, unit), a grid
// barrier a step. Not rnncc's kernel: LSTM only, no bias, no lengths, h0 = c0 = 0.
//
// FUSED (layers after the first): W_ihᵀ of the block's columns stays in shared memory, and
// the projection of step t + 1, x_{t+1}·W_ihᵀ with x the layer below's h, is summed while
// the block waits at step t's grid barrier: the block arrives, waits until the layer below
// has finished step t + 1 (its blocks each add 1 to its progress word after writing a
// step), stages x_{t+1} (each warp its own K rows), sums its partial products into the
// registers that start step t + 1's sums, and only then polls the barrier. So the
// projection costs the step what it adds beyond the barrier's wait, and no GEMM runs
// between layers. The first layer reads a projection made before it (xp).
//
// -DNO_PROJECTION (with FUSED): the projection's staging and sums left out (the wait for
// the layer below kept), to time what the fused projection adds.
#include "forward_common.cuh"

#ifndef H
#define H 512
#endif
#ifndef B
#define B 8
#endif
#ifndef UNITS
#define UNITS 16
#endif
#ifndef FUSED
#define FUSED 0
#endif
#define NT 256
#define G 4
#define WARPS (NT / 32)
#define KW (H / WARPS)          // K rows a warp (of h, and of x: I = H)
#define COLS (G * UNITS)            // the block's gate columns, column j·G + g
#define C (COLS / 32)           // columns a lane
#define CELLS (B * UNITS)           // cells a step: thread (row tid / UNITS, unit tid % UNITS)

static_assert(COLS % 32 == 0 && C % 2 == 0, "whole float2s of columns a lane");
static_assert(H % WARPS == 0 && KW % 4 == 0, "whole float4s of K a warp");
static_assert(CELLS <= NT, "a cell a thread");

// Bytes of shared memory: h_s [B][H], the warps' sums [WARPS][B][COLS], and with FUSED
// x_s [B][H] and W_ihᵀ [H][COLS].
#define SHARED_FLOATS (B * H + WARPS * B * COLS + (FUSED ? B * H + H * COLS : 0))

__device__ __forceinline__ void barrier_arrive(unsigned* barrier, unsigned* progress) {
    // The block's h of this step is written (the __syncthreads before); one release each:
    // the barrier's arrival, and the progress the layer above waits on.
    if (threadIdx.x == 0) {
        const unsigned add = blockIdx.x == 0 ? 0x80000000u - (gridDim.x - 1) : 1u;
        asm volatile("red.release.gpu.global.add.u32 [%0], %1;" :: "l"(progress), "r"(1u) : "memory");
        if (barrier != nullptr) asm volatile("red.release.gpu.global.add.u32 [%0], %1;" :: "l"(barrier), "r"(add) : "memory");
    }
}

// w_hh_t, w_ih_t: [H][G·H] (column j·G + g: gate g of unit j); xp: [S][B][G·H], the first
// layer's projection (FUSED: unused); x: [S][B][H], the layer below's h (FUSED); y: [S][B][H]
// this layer's h; barrier: this launch's word; progress: this layer's (+1 a block a step);
// below: the layer below's progress word, below_blocks its blocks; status: a give-up flag.
// Words zero before the launch.
extern "C" __global__ void __launch_bounds__(NT, 1)
k_wavefront_layer(const float* __restrict__ w_hh_t, const float* __restrict__ w_ih_t, const float* __restrict__ xp,
                  const float* x, float* y, unsigned* barrier, unsigned* progress, const unsigned* below,
                  int below_blocks, unsigned* status, int steps) {
    extern __shared__ __align__(16) float smem[];
    float (*h_s)[H] = reinterpret_cast<float (*)[H]>(smem);
    float (*part)[B][COLS] = reinterpret_cast<float (*)[B][COLS]>(smem + B * H);
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const int c0 = blockIdx.x * COLS, k0 = warp * KW;
    float w_r[KW][C];
#pragma unroll
    for (int k = 0; k < KW; ++k)
#pragma unroll
        for (int c = 0; c < C; ++c) w_r[k][c] = w_hh_t[(long long)(k0 + k) * G * H + c0 + lane * C + c];
#if FUSED
    [[maybe_unused]] float (*x_s)[H] = reinterpret_cast<float (*)[H]>(smem + B * H + WARPS * B * COLS);
    float (*wih_s)[COLS] = reinterpret_cast<float (*)[COLS]>(smem + 2 * B * H + WARPS * B * COLS);
    for (int e = tid; e < H * COLS; e += NT) wih_s[e / COLS][e % COLS] = w_ih_t[(long long)(e / COLS) * G * H + c0 + e % COLS];
    __syncthreads();
    float pacc[C][B];  // the next step's projection: this warp's K rows' share
    // The projection of step t: wait for the layer below's step t, stage x_t's rows of this
    // warp, sum them into pacc.
    auto project = [&](int t) {
        if (lane == 0) wait_word(below, (unsigned)((t + 1) * below_blocks), false, status);
        __syncwarp();
#pragma unroll
        for (int c = 0; c < C; ++c)
#pragma unroll
            for (int r = 0; r < B; ++r) pacc[c][r] = 0.0f;
#ifndef NO_PROJECTION
        for (int i = lane; i < B * KW / 4; i += 32) {
            const int r = i / (KW / 4), col = k0 + i % (KW / 4) * 4;
            stage16(&x_s[r][col], x + ((long long)t * B + r) * H + col);
        }
        asm volatile("cp.async.commit_group;\ncp.async.wait_group 0;" ::: "memory");
        __syncwarp();
#pragma unroll 4
        for (int kk = 0; kk < KW; kk += 4) {
            float wv[4][C];
#pragma unroll
            for (int j = 0; j < 4; ++j)
#pragma unroll
                for (int c = 0; c < C; c += 2) {
                    const float2 v = *reinterpret_cast<const float2*>(&wih_s[k0 + kk + j][lane * C + c]);
                    wv[j][c] = v.x;
                    wv[j][c + 1] = v.y;
                }
#pragma unroll
            for (int r = 0; r < B; ++r) {
                const float4 v = *reinterpret_cast<const float4*>(&x_s[r][k0 + kk]);
#pragma unroll
                for (int c = 0; c < C; ++c) pacc[c][r] += v.x * wv[0][c] + v.y * wv[1][c] + v.z * wv[2][c] + v.w * wv[3][c];
            }
        }
#endif
    };
    project(0);
#endif
    const int b = tid / UNITS, j = tid % UNITS;
    float cell_c = 0.0f;
    for (int t = 0; t < steps; ++t) {
        float xv[G];
#pragma unroll
        for (int g = 0; g < G; ++g)
            xv[g] = !FUSED && tid < CELLS ? xp[((long long)t * B + b) * G * H + c0 + j * G + g] : 0.0f;
        float acc[C][B];
#pragma unroll
        for (int c = 0; c < C; ++c)
#pragma unroll
#if FUSED
            for (int r = 0; r < B; ++r) acc[c][r] = pacc[c][r];
#else
            for (int r = 0; r < B; ++r) acc[c][r] = 0.0f;
#endif
        if (t > 0) {
            const float* h_prev = y + (long long)(t - 1) * B * H;
            for (int i = lane; i < B * KW / 4; i += 32) {
                const int r = i / (KW / 4), col = k0 + i % (KW / 4) * 4;
                stage16(&h_s[r][col], h_prev + (long long)r * H + col);
            }
            asm volatile("cp.async.commit_group;\ncp.async.wait_group 0;" ::: "memory");
            __syncwarp();
#pragma unroll
            for (int kk = 0; kk < KW; kk += 4) {
#pragma unroll
                for (int r = 0; r < B; ++r) {
                    const float4 v = *reinterpret_cast<const float4*>(&h_s[r][k0 + kk]);
#pragma unroll
                    for (int c = 0; c < C; ++c)
                        acc[c][r] += v.x * w_r[kk][c] + v.y * w_r[kk + 1][c] + v.z * w_r[kk + 2][c] + v.w * w_r[kk + 3][c];
                }
            }
        }
#pragma unroll
        for (int c = 0; c < C; ++c)
#pragma unroll
            for (int r = 0; r < B; ++r) part[warp][r][lane * C + c] = acc[c][r];
        __syncthreads();
        if (tid < CELLS) {
            float v[G];
#pragma unroll
            for (int g = 0; g < G; ++g) {
                v[g] = xv[g];
#pragma unroll
                for (int p = 0; p < WARPS; ++p) v[g] += part[p][b][j * G + g];
            }
            cell_c = sigmoid(v[1]) * cell_c + sigmoid(v[0]) * tanhf(v[2]);
            y[((long long)t * B + b) * H + blockIdx.x * UNITS + j] = sigmoid(v[3]) * tanhf(cell_c);
        }
        __syncthreads();  // h written, and the sums read before the next step writes them
        const bool more = t + 1 < steps;
        unsigned before = 0;
        if (more && tid == 0) asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(before) : "l"(barrier) : "memory");
        barrier_arrive(more ? barrier : nullptr, progress);
#if FUSED
        if (more) project(t + 1);
#endif
        if (more) {
            if (tid == 0) {
                wait_word(barrier, before, true, status);
                asm volatile("fence.acq_rel.gpu;" ::: "memory");
            }
            __syncthreads();
        }
    }
}

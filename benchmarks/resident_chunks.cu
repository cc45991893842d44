// Issue 15, GNMT B=8 (docs/design-notes.md, "GNMT B=8 at 1.73 ms, taken apart"): a
// recurrent kernel that stays resident for the whole sequence and waits, chunk by chunk,
// for its input projection to be written by a GEMM on another stream, instead of one grid
// launch a chunk. This prototype measures the mechanism, not the cell: a step is a
// calibrated spin (SPIN cycles, standing for the product and the cell) plus a real grid
// barrier among the layer's blocks, a read of the step's projection and a write of h.
//
// One launch a layer, NB blocks (one a SM: the dynamic shared memory asked for keeps other
// kernels' blocks off its SMs, as W_hh does in rnncc's kernels):
//   at a chunk's first step thread 0 of every block polls proj_ready[c] (>= 1), written
//   after the projection's GEMM (by a stream write, or by a wait kernel's caller);
//   each step: the spin, h[t] = f(proj[t], h[t-1]) for the block's units, a grid barrier;
//   after a chunk's last barrier block 0 releases h_ready[c] = 1 (the next layer's
//   projection waits on it) and stamps the time.
// Every wait is bounded: past BOUND polls the kernel sets *timed_out and leaves, so a
// mistake fails the run instead of hanging the GPU.
#include <cuda_fp16.h>

// ELEM: the stack's storage type, __half (GNMT fp16) or float (-DELEM=float: fp32 stacks).
#ifndef ELEM
#define ELEM __half
#endif
__device__ __forceinline__ float to_f(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_f(float v) { return v; }
__device__ __forceinline__ void from_f(__half* p, float v) { *p = __float2half(v); }
__device__ __forceinline__ void from_f(float* p, float v) { *p = v; }

#ifndef BOUND
#define BOUND (1 << 22)  // ~2.5 s of L2 polls
#endif

__device__ __forceinline__ int load_acquire(const int* p) {
    int v;
    asm volatile("ld.acquire.gpu.global.b32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

__device__ __forceinline__ void store_release(int* p, int v) {
    asm volatile("st.release.gpu.global.b32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

__device__ __forceinline__ unsigned long long globaltimer() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %globaltimer;" : "=l"(t));
    return t;
}

// Counter and generation in bar[0], bar[1]; returns false past BOUND polls.
__device__ __forceinline__ bool grid_barrier(int* bar, int blocks, int* timed_out) {
    __syncthreads();
    bool ok = true;
    if (threadIdx.x == 0) {
        const int gen = load_acquire(bar + 1);
        __threadfence();
        if (atomicAdd(bar, 1) == blocks - 1) {
            bar[0] = 0;
            __threadfence();
            store_release(bar + 1, gen + 1);
        } else {
            int polls = 0;
            while (load_acquire(bar + 1) == gen) {
                if (++polls > BOUND || *(volatile int*)timed_out) { atomicExch(timed_out, 1); ok = false; break; }
            }
        }
    }
    __syncthreads();
    return __syncthreads_and(ok);
}

// A block leaving after a timed-out wait: block 0 releases every chunk of h, so that the
// streams waiting on them drain and the run fails by its flag instead of hanging.
__device__ __forceinline__ void leave(int* h_ready, int chunks) {
    if (blockIdx.x == 0 && threadIdx.x == 0)
        for (int c = 0; c < chunks; ++c) store_release(h_ready + c, 1);
}

// Polls *flag >= 1; false, with *timed_out set, past BOUND polls or once another wait
// timed out.
__device__ __forceinline__ bool poll_flag(const int* flag, int* timed_out) {
    int polls = 0;
    while (load_acquire(flag) < 1) {
        if (++polls > BOUND || *(volatile int*)timed_out) { atomicExch(timed_out, 1); return false; }
    }
    return true;
}

// A chunk's wait by the whole block: thread 0 polls, every thread learns whether to go on.
__device__ __forceinline__ bool block_waits_for(const int* flag, int* timed_out) {
    if (threadIdx.x == 0) poll_flag(flag, timed_out);
    return __syncthreads_and(*(volatile int*)timed_out == 0);
}

// Step t once its projection is in proj (ELEM, or float from the fused projection): the
// spin standing for the product, h[t] of the block's units [u0, u1) from proj[t] (4 gates)
// and h[t-1] (a real dependency on both, so the waits are needed for a right answer), the
// grid barrier, and after a chunk's last step block 0's release of it. False if the
// barrier timed out.
template <typename P>
__device__ __forceinline__ bool run_step(const P* proj, ELEM* h, int t, int steps, int chunk, long long spin,
                                         int units, int batch, int u0, int u1, int* bar, int* h_ready,
                                         unsigned long long* chunk_done, float* keep, int* timed_out) {
    const long long start = clock64();
    while (clock64() - start < spin) {}
    for (int i = threadIdx.x; i < (u1 - u0) * batch; i += blockDim.x) {
        const int b = i / (u1 - u0), u = u0 + i % (u1 - u0);
        const P* p = proj + ((long long)t * batch + b) * 4 * units + 4 * u;
        float v = to_f(p[0]) + to_f(p[1]) + to_f(p[2]) + to_f(p[3]);
        if (t > 0) v += 0.5f * to_f(h[((long long)(t - 1) * batch + b) * units + u]);
        from_f(&h[((long long)t * batch + b) * units + u], tanhf(v));
    }
    keep[threadIdx.x] = 0.0f;
    if (!grid_barrier(bar, gridDim.x, timed_out)) return false;
    if (((t + 1) % chunk == 0 || t + 1 == steps) && blockIdx.x == 0 && threadIdx.x == 0) {
        __threadfence();
        store_release(h_ready + t / chunk, 1);
        chunk_done[t / chunk] = globaltimer();
    }
    return true;
}

// A layer's loop for the whole sequence, the plain kernel's and the fused one's: at a
// chunk's first step start_chunk(c, u0, u1) waits for the chunk's input (and, fused,
// projects it), false after a timed-out wait; block 0 then stamps the chunk as seen; then
// each step (run_step). A timed-out wait or barrier releases every chunk and leaves.
template <typename P, typename StartChunk>
__device__ __forceinline__ void resident_loop(const P* proj, ELEM* h, int* h_ready, int* bar, int steps, int chunk,
                                              long long spin, int units, int batch,
                                              unsigned long long* chunk_seen, unsigned long long* chunk_done,
                                              int* timed_out, float* keep, StartChunk start_chunk) {
    const int per = (units + gridDim.x - 1) / gridDim.x;
    const int u0 = blockIdx.x * per, u1 = min(units, u0 + per);
    const int chunks = (steps + chunk - 1) / chunk;
    for (int t = 0; t < steps; ++t) {
        if (t % chunk == 0) {
            if (!start_chunk(t / chunk, u0, u1)) { leave(h_ready, chunks); return; }
            if (blockIdx.x == 0 && threadIdx.x == 0) chunk_seen[t / chunk] = globaltimer();
        }
        if (!run_step(proj, h, t, steps, chunk, spin, units, batch, u0, u1, bar, h_ready, chunk_done, keep,
                      timed_out)) { leave(h_ready, chunks); return; }
    }
}

extern "C" __global__ void __launch_bounds__(256) k_resident_layer(
        const int* proj_ready, int* h_ready, int* bar, const ELEM* __restrict__ proj, ELEM* h,
        int steps, int chunk, long long spin, int units, int batch,
        unsigned long long* chunk_seen, unsigned long long* chunk_done, int* timed_out) {
    extern __shared__ float keep_sm_for_this_block[];  // sized by the host: one block a SM
    resident_loop(proj, h, h_ready, bar, steps, chunk, spin, units, batch, chunk_seen, chunk_done, timed_out,
                  keep_sm_for_this_block,
                  [&](int c, int, int) { return block_waits_for(proj_ready + c, timed_out); });
}

#if defined(FUSED)
#include <mma.h>
using namespace nvcuda;

#if !defined(RING_STAGES)
// The chunk's projection by wmma with both operands read from L2, no pipeline: every warp
// waits on its own loads each k-step (the first form measured: latency-bound).
__device__ __forceinline__ void project_chunk(const __half* __restrict__ x_in, const __half* __restrict__ w_ih,
                                              int in_features, float* projf, int units, int u0, int u1,
                                              int r0, int rows, char*) {
    const int warp = threadIdx.x / 32, warps = blockDim.x / 32;
    const int cols = 4 * (u1 - u0), tiles_m = rows / 16, tiles_n = cols / 16;
    for (int tile = warp; tile < tiles_m * tiles_n; tile += warps) {
        const int tm = tile % tiles_m, tn = tile / tiles_m;
        wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
        wmma::fill_fragment(acc, 0.0f);
        const __half* a = x_in + (long long)(r0 + 16 * tm) * in_features;
        const __half* b = w_ih + (long long)(4 * u0 + 16 * tn) * in_features;
#pragma unroll 8
        for (int k = 0; k < in_features; k += 16) {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> fa;
            wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> fb;
            wmma::load_matrix_sync(fa, a + k, in_features);
            wmma::load_matrix_sync(fb, b + k, in_features);
            wmma::mma_sync(acc, fa, fb, acc);
        }
        wmma::store_matrix_sync(projf + (long long)(r0 + 16 * tm) * 4 * units + 4 * u0 + 16 * tn, acc,
                                4 * units, wmma::mem_row_major);
    }
}
#else
// The chunk's projection through a ring of RING_STAGES shared-memory slots filled by
// cp.async (-DRING_STAGES=n): the shared memory a block has beside its W_hh (W_HH_KIB)
// is all the projection may use, so the ring is small and the bytes in flight a block are
// what bounds it. A slot holds a K tile of 32 of the row block's 64 rows of x and of the
// block's 128 gate columns of W_ih, rows padded to 40 halves (80 bytes: the 8 rows of an
// ldmatrix fall in distinct banks). 8 warps, each 32 rows × 32 columns (2 × 2 fragments).
#if !defined(W_HH_KIB)
#define W_HH_KIB 188
#endif
constexpr int RING_KT = 32, RING_LD = RING_KT + 8, RING_ROWS = 64, RING_COLS = 128;
constexpr int RING_SLOT = (RING_ROWS + RING_COLS) * RING_LD;  // halves

__device__ __forceinline__ void cp_async16(void* dst, const void* src) {
    const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(d), "l"(src) : "memory");
}
__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_wait() { asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory"); }

// K tile kt of x's rows [a, a + 64) and W_ih's gate rows [b, b + 128) into a slot.
__device__ __forceinline__ void stage_tile(__half* slot, const __half* a, const __half* b, int in_features, int kt) {
    constexpr int vectors_a_row = RING_KT / 8;
    for (int v = threadIdx.x; v < (RING_ROWS + RING_COLS) * vectors_a_row; v += blockDim.x) {
        const int row = v / vectors_a_row, col = (v % vectors_a_row) * 8;
        const __half* src = (row < RING_ROWS ? a + (long long)row * in_features
                                             : b + (long long)(row - RING_ROWS) * in_features) + kt * RING_KT + col;
        cp_async16(slot + row * RING_LD + col, src);
    }
}

__device__ __forceinline__ void project_chunk(const __half* __restrict__ x_in, const __half* __restrict__ w_ih,
                                              int in_features, float* projf, int units, int u0, int,
                                              int r0, int rows, char* shared) {
    __half* ring = reinterpret_cast<__half*>(shared + W_HH_KIB * 1024);
    const int warp = threadIdx.x / 32, wm = warp % 2, wn = warp / 2;
    const int k_tiles = in_features / RING_KT;
    const __half* b = w_ih + (long long)(4 * u0) * in_features;
    for (int rb = 0; rb < rows; rb += RING_ROWS) {
        const __half* a = x_in + (long long)(r0 + rb) * in_features;
        wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[2][2];
        for (int i = 0; i < 2; ++i)
            for (int j = 0; j < 2; ++j) wmma::fill_fragment(acc[i][j], 0.0f);
        for (int s = 0; s < RING_STAGES - 1; ++s) {
            if (s < k_tiles) stage_tile(ring + s * RING_SLOT, a, b, in_features, s);
            cp_commit();
        }
        for (int kt = 0; kt < k_tiles; ++kt) {
            cp_wait<RING_STAGES - 2>();
            __syncthreads();  // tile kt landed for every thread; slot (kt - 1) % n is free
            const int next = kt + RING_STAGES - 1;
            if (next < k_tiles) stage_tile(ring + (next % RING_STAGES) * RING_SLOT, a, b, in_features, next);
            cp_commit();
            const __half* slot = ring + (kt % RING_STAGES) * RING_SLOT;
#pragma unroll
            for (int ks = 0; ks < RING_KT; ks += 16) {
                wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> fa[2];
                wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> fb[2];
                for (int i = 0; i < 2; ++i)
                    wmma::load_matrix_sync(fa[i], slot + (32 * wm + 16 * i) * RING_LD + ks, RING_LD);
                for (int j = 0; j < 2; ++j)
                    wmma::load_matrix_sync(fb[j], slot + (RING_ROWS + 32 * wn + 16 * j) * RING_LD + ks, RING_LD);
                for (int i = 0; i < 2; ++i)
                    for (int j = 0; j < 2; ++j) wmma::mma_sync(acc[i][j], fa[i], fb[j], acc[i][j]);
            }
        }
        cp_wait<0>();
        __syncthreads();  // the ring is reused by the next row block
        for (int i = 0; i < 2; ++i)
            for (int j = 0; j < 2; ++j)
                wmma::store_matrix_sync(projf + (long long)(r0 + rb + 32 * wm + 16 * i) * 4 * units + 4 * u0 +
                                            32 * wn + 16 * j,
                                        acc[i][j], 4 * units, wmma::mem_row_major);
    }
}
#endif

// The chunk's projection in the layer's own kernel (compiled with -DFUSED, fp16): at a
// chunk's first step every block waits for the previous layer's release of that chunk of h
// (in_ready[c]), then multiplies the chunk's rows (chunk · batch) by W_ih's rows of its own
// units' gates (4·U of them, unit-interleaved) on tensor cores (project_chunk: wmma from
// L2, or through a cp.async ring with -DRING_STAGES), and writes the float32 sums into
// projf, whose columns only this block reads. So there is no GEMM launch and no SMs of the
// projection's own; the lag is the chunk plus this.
extern "C" __global__ void __launch_bounds__(256) k_resident_layer_fused(
        const __half* __restrict__ x_in, const __half* __restrict__ w_ih, int in_features,
        const int* in_ready, int* h_ready, int* bar, float* projf, __half* h,
        int steps, int chunk, long long spin, int units, int batch,
        unsigned long long* chunk_seen, unsigned long long* chunk_done, int* timed_out) {
    extern __shared__ float keep_sm_for_this_block[];  // sized by the host: one block a SM
    resident_loop(projf, h, h_ready, bar, steps, chunk, spin, units, batch, chunk_seen, chunk_done, timed_out,
                  keep_sm_for_this_block, [&](int c, int u0, int u1) {
                      if (!block_waits_for(in_ready + c, timed_out)) return false;
                      // Rows and columns in whole 16s (the host checks chunk · batch and 4·U).
                      project_chunk(x_in, w_ih, in_features, projf, units, u0, u1, c * chunk * batch,
                                    min(chunk, steps - c * chunk) * batch,
                                    reinterpret_cast<char*>(keep_sm_for_this_block));
                      __syncthreads();  // the block's own columns, read by its own threads
                      return true;
                  });
}
#endif

// The wait for the variant without stream memory operations: one thread polls *flag >= 1
// before the GEMM queued after it on the same stream.
extern "C" __global__ void k_wait_flag(const int* flag, int* timed_out) { poll_flag(flag, timed_out); }

// The write after the GEMM in that variant.
extern "C" __global__ void k_set_flag(int* flag) {
    __threadfence();
    store_release(flag, 1);
}

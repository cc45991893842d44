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

extern "C" __global__ void __launch_bounds__(256) k_resident_layer(
        const int* proj_ready, int* h_ready, int* bar, const ELEM* __restrict__ proj, ELEM* h,
        int steps, int chunk, long long spin, int units, int batch,
        unsigned long long* chunk_seen, unsigned long long* chunk_done, int* timed_out) {
    extern __shared__ float keep_sm_for_this_block[];  // sized by the host: one block a SM
    const int blocks = gridDim.x;
    const int u0 = blocks > 0 ? blockIdx.x * ((units + blocks - 1) / blocks) : 0;
    const int u1 = min(units, u0 + (units + blocks - 1) / blocks);
    for (int t = 0; t < steps; ++t) {
        const int c = t / chunk;
        if (t % chunk == 0) {
            if (threadIdx.x == 0) {
                int polls = 0;
                while (load_acquire(proj_ready + c) < 1) {
                    if (++polls > BOUND || *(volatile int*)timed_out) { atomicExch(timed_out, 1); break; }
                }
                if (blockIdx.x == 0) chunk_seen[c] = globaltimer();
            }
            if (!__syncthreads_and(*(volatile int*)timed_out == 0)) { leave(h_ready, (steps + chunk - 1) / chunk); return; }
        }
        const long long start = clock64();
        while (clock64() - start < spin) {}
        // h[t] of the block's units from proj[t] (4 gates) and h[t-1]: a real dependency on
        // both, so the waits above are needed for a right answer.
        for (int i = threadIdx.x; i < (u1 - u0) * batch; i += blockDim.x) {
            const int b = i / (u1 - u0), u = u0 + i % (u1 - u0);
            const ELEM* p = proj + ((long long)t * batch + b) * 4 * units + 4 * u;
            float v = to_f(p[0]) + to_f(p[1]) + to_f(p[2]) + to_f(p[3]);
            if (t > 0) v += 0.5f * to_f(h[((long long)(t - 1) * batch + b) * units + u]);
            from_f(&h[((long long)t * batch + b) * units + u], tanhf(v));
        }
        keep_sm_for_this_block[threadIdx.x] = 0.0f;
        if (!grid_barrier(bar, blocks, timed_out)) { leave(h_ready, (steps + chunk - 1) / chunk); return; }
        if ((t + 1) % chunk == 0 || t + 1 == steps) {
            if (blockIdx.x == 0 && threadIdx.x == 0) {
                __threadfence();
                store_release(h_ready + c, 1);
                chunk_done[c] = globaltimer();
            }
        }
    }
}

// The wait for the variant without stream memory operations: one thread polls *flag >= 1
// before the GEMM queued after it on the same stream.
extern "C" __global__ void k_wait_flag(const int* flag, int* timed_out) {
    int polls = 0;
    while (load_acquire(flag) < 1) {
        if (++polls > BOUND || *(volatile int*)timed_out) { atomicExch(timed_out, 1); return; }
    }
}

// The write after the GEMM in that variant.
extern "C" __global__ void k_set_flag(int* flag) {
    __threadfence();
    store_release(flag, 1);
}

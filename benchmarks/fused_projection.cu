// A prototype for issue 14's H=512 row (docs/design-notes.md, "Next for issue 14's H=512
// row: the projection inside the recurrent launch"): one launch whose first P blocks are
// producers of the input projection and whose other blocks stand in for the recurrent
// cluster, a consumer that reads the projection of each step and then spends a fixed step
// time (the recurrent kernel's 1.21 µs at LSTM fp16 H=512 B=8) before the next.
//
// Producers: block p keeps W_ih's rows [p·NC, p·NC + NC) (gate columns of the projection)
// in shared memory for the whole launch, and for each chunk of CHUNK steps stages the
// chunk's x rows (CHUNK·B of them) and computes xproj = x·W_ihᵀ + b for its columns on
// tensor cores (mma.sync m16n8k16, float32 accumulation; a warp's 16 columns × all rows),
// then publishes the chunk: its stores, a block barrier, a fence and one atomic add on the
// chunk's flag. Consumers wait for a chunk's flag to reach P (one thread, acquire loads;
// then a block barrier) at the chunk's first step only.
//
// What it measures (fused_projection.py): whether P producers stay ahead of the step, how
// long the consumer waits for the first chunk after the launch starts, and how much the
// waits add over the consumer alone with the projection ready.
//
// Compile-time sizes: I (input features, a multiple of 16), GH (gate columns, a multiple of
// NC), B (batch rows), CHUNK (steps a chunk), NC (columns a producer; 16 a warp column
// group), RG (row groups: the chunk's rows split among RG warps of a column group).
// A producer's x rows are double-buffered: chunk c + 1 is copied in (cp.async) while chunk c
// is multiplied.
#include <cuda_fp16.h>

#ifndef I
#define I 512
#endif
#ifndef GH
#define GH 2048
#endif
#ifndef B
#define B 8
#endif
#ifndef CHUNK
#define CHUNK 8
#endif
#ifndef NC
#define NC 128
#endif
#ifndef RG
#define RG 1
#endif
#define NT (NC / 16 * RG * 32)    // a warp per 16 columns and row group
#define ROWS (CHUNK * B)          // x rows a chunk
#define NTILES (ROWS / 8 / RG)    // a warp's 8-row tiles
#define KP (I + 8)                // a staged row's pitch in halves: ldmatrix rows land in distinct banks
#define P (GH / NC)               // producer blocks

static_assert(I % 16 == 0 && GH % NC == 0 && NC % 16 == 0 && ROWS % (8 * RG) == 0, "sizes");

__device__ __forceinline__ unsigned long long now_ns() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

__device__ __forceinline__ unsigned load_acquire(const unsigned* p) {
    unsigned v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

__device__ __forceinline__ void mma16816(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

__device__ __forceinline__ void ldmatrix_x4(unsigned (&r)[4], const __half* p) {
    const unsigned s = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(s));
}

__device__ __forceinline__ void ldmatrix_x2(unsigned (&r)[2], const __half* p) {
    const unsigned s = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];" : "=r"(r[0]), "=r"(r[1]) : "r"(s));
}

// 16 bytes from global to shared memory, asynchronously (zero-filled where `valid` is false).
__device__ __forceinline__ void copy16(__half* dst, const __half* src, bool valid) {
    const unsigned s = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" :: "r"(s), "l"(src), "r"(valid ? 16 : 0) : "memory");
}

// cp.async.wait_group takes an immediate: the pending groups allowed, 0 to 5.
__device__ __forceinline__ void wait_pending(int n) {
    switch (n) {
        case 0: asm volatile("cp.async.wait_group 0;" ::: "memory"); break;
        case 1: asm volatile("cp.async.wait_group 1;" ::: "memory"); break;
        case 2: asm volatile("cp.async.wait_group 2;" ::: "memory"); break;
        case 3: asm volatile("cp.async.wait_group 3;" ::: "memory"); break;
        case 4: asm volatile("cp.async.wait_group 4;" ::: "memory"); break;
        default: asm volatile("cp.async.wait_group 5;" ::: "memory"); break;
    }
}

// The first chunk's W_ih and x arrive in KQ groups along K, so that its product starts on
// the first slice instead of waiting for all of W_ih (KQ = 1: one group). Measured: KQ = 4
// did not shorten the first wait (results/fused-projection-h100-2026-11-27.txt), so 1.
#ifndef KQ
#define KQ 1
#endif
#ifndef AHEAD
#define AHEAD 1
#endif
static_assert((I / 16) % KQ == 0 && KQ <= 4, "K phases of the first chunk");

// Producer p: xproj[t][b][p·NC + c] for every step t, chunk by chunk.
__device__ void produce(const __half* __restrict__ x, const __half* __restrict__ w_ih,
                        const float* __restrict__ bias, float* __restrict__ xproj,
                        unsigned* flags, int steps, __half* shared) {
    __half* w_s = shared;             // NC rows × KP
    __half* x_s = shared + NC * KP;   // 2 buffers of ROWS rows × KP
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int grp = lane / 4, quad = lane % 4;
    const int wc = warp % (NC / 16), wr = warp / (NC / 16);  // column group, row group
    const int col0 = blockIdx.x * NC;
    const int chunks = (steps + CHUNK - 1) / CHUNK;
    // Chunk c's rows, K columns [k0, k1), into buffer c & 1 (rows past the end: zeros).
    auto stage_x = [&](int c, int k0, int k1) {
        const int rows = min(ROWS, (steps - c * CHUNK) * B), k8s = (k1 - k0) / 8;
        __half* buf = x_s + (c & 1) * ROWS * KP;
        for (int e = tid; e < ROWS * k8s; e += NT) {
            const int r = e / k8s, k = k0 + e % k8s * 8;
            copy16(buf + r * KP + k, x + ((long long)c * ROWS + min(r, rows - 1)) * I + k, r < rows);
        }
    };
    // The first chunk's groups: W_ih's and x's K slice q each; then chunk 1's x.
    for (int q = 0; q < KQ; ++q) {
        const int k0 = q * (I / KQ), k8s = I / KQ / 8;
        for (int e = tid; e < NC * k8s; e += NT) {
            const int r = e / k8s, k = k0 + e % k8s * 8;
            copy16(w_s + r * KP + k, w_ih + (long long)(col0 + r) * I + k, true);
        }
        stage_x(0, k0, k0 + I / KQ);
        asm volatile("cp.async.commit_group;" ::: "memory");
    }
    float acc[NTILES][4];
    auto product = [&](const __half* buf, int ks0, int ks1) {
#pragma unroll 4
        for (int ks = ks0; ks < ks1; ++ks) {
            unsigned a[4];
            ldmatrix_x4(a, w_s + (wc * 16 + lane % 16) * KP + ks * 16 + (lane / 16) * 8);
#pragma unroll
            for (int n = 0; n < NTILES; ++n) {
                unsigned b[2];
                ldmatrix_x2(b, buf + ((wr * NTILES + n) * 8 + lane % 8) * KP + ks * 16 + ((lane / 8) % 2) * 8);
                mma16816(acc[n], a, b);
            }
        }
    };
    for (int c = 0; c < chunks; ++c) {
        const int rows = min(ROWS, (steps - c * CHUNK) * B);
        const bool next = c + 1 < chunks;
        if (next) {
            stage_x(c + 1, 0, I);
            asm volatile("cp.async.commit_group;" ::: "memory");
        }
        const __half* buf = x_s + (c & 1) * ROWS * KP;
#pragma unroll
        for (int n = 0; n < NTILES; ++n)
#pragma unroll
            for (int i = 0; i < 4; ++i) acc[n][i] = 0.0f;
        if (c == 0) {
#pragma unroll
            for (int q = 0; q < KQ; ++q) {
                wait_pending(KQ - 1 - q + (next ? 1 : 0));
                __syncthreads();  // slice q of W_ih and of chunk 0 in for every thread
                product(buf, q * (I / 16 / KQ), (q + 1) * (I / 16 / KQ));
            }
        } else {
            wait_pending(next ? 1 : 0);
            __syncthreads();  // chunk c in for every thread
            product(buf, 0, I / 16);
        }
        // C fragment: d0, d1 at (column grp, rows 2·quad, 2·quad + 1); d2, d3 at column grp + 8.
#pragma unroll
        for (int n = 0; n < NTILES; ++n)
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const int row = (wr * NTILES + n) * 8 + 2 * quad + (i & 1);
                const int col = col0 + wc * 16 + grp + 8 * (i >> 1);
                if (row < rows)
                    xproj[((long long)c * ROWS + row) * GH + col] = acc[n][i] + bias[col];
            }
        __syncthreads();  // every thread's stores before the flag; buffer c & 1 free again
        if (tid == 0) {
            __threadfence();
            atomicAdd(flags + c, 1u);
        }
    }
}

// Consumer j of `consumers`: per step, its share of the step's projection (B rows × its
// columns), then the step's own time. stats[j]: {first wait, all waits, start, end} in ns.
__device__ void consume(const float* __restrict__ xproj, const unsigned* flags, int steps,
                        int consumers, long long step_ns, unsigned long long* stats, float* sums) {
    const int j = blockIdx.x - P, tid = threadIdx.x;
    const int cols = GH / consumers, col0 = j * cols;
    unsigned long long start = now_ns(), first = 0, waits = 0;
    float sum = 0.0f;
    // A chunk's flag is awaited by thread 0: with AHEAD, during the last step of the chunk
    // before (inside that step's time, as a warp off the step's path would), else at the
    // chunk's first step; the first chunk's always at step 0. The step's block barrier
    // orders the acquire before every thread's loads of the chunk.
    auto await_chunk = [&](int c) {
        const unsigned long long w0 = now_ns();
        while (load_acquire(flags + c) < P) {
        }
        const unsigned long long w = now_ns() - w0;
        waits += w;
        if (c == 0) first = w;
    };
    for (int t = 0; t < steps; ++t) {
        if (t % CHUNK == 0 && (t == 0 || !AHEAD)) {
            if (tid == 0) await_chunk(t / CHUNK);
            __syncthreads();
        }
        const unsigned long long s0 = now_ns();
        for (int e = tid; e < B * cols; e += NT)
            sum += __ldcg(xproj + ((long long)t * B + e / cols) * GH + col0 + e % cols);
        if (AHEAD && tid == 0 && (t + 1) % CHUNK == 0 && t + 1 < steps) await_chunk((t + 1) / CHUNK);
        while ((long long)(now_ns() - s0) < step_ns) {
        }
        __syncthreads();  // the step's block barrier
    }
    atomicAdd(sums, sum);
    if (tid == 0) {
        stats[4 * j] = first;
        stats[4 * j + 1] = waits;
        stats[4 * j + 2] = start;
        stats[4 * j + 3] = now_ns();
    }
}

// Blocks [0, P) produce (when `produce_too`), blocks [P, P + consumers) consume.
extern "C" __global__ void __launch_bounds__(NT, 1)
k_fused(const __half* x, const __half* w_ih, const float* bias, float* xproj, unsigned* flags,
        int steps, int consumers, long long step_ns, int produce_too,
        unsigned long long* stats, float* sums) {
    extern __shared__ __align__(16) __half shared[];
    if (blockIdx.x < P) {
        if (produce_too) produce(x, w_ih, bias, xproj, flags, steps, shared);
        return;
    }
    consume(xproj, flags, steps, consumers, step_ns, stats, sums);
}

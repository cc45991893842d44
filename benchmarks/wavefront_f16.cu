// A prototype of issue 15's wavefront for fp16 stacks at B=8 (GNMT's encoder, 4 × LSTM
// H=1024): every layer runs its whole sequence in one launch on 32 SMs, four layers at
// once, and layer l + 1 follows layer l P steps behind through layer l's progress word,
// with no launch a chunk. rnncc's pipelined schedule relaunches each layer every chunk of
// 32 steps, and a layer's lag behind the layer it reads is its largest chunk
// (docs/design-notes.md, "Short first chunks, and projections ahead priced beside
// clusters": no ramp of chunk sizes shortened it); here the lag is P steps.
//
// One kernel a layer, LSTM only (gates i, f, g, o), no residual, h0 = c0 = 0. Block x owns
// UNITS = 32 units, its 128 gate rows unit-interleaved (row 4·u + g), as rnncc's tensor
// grid tile at 4 partitions has them; 16 warps: warp w multiplies m-tile w % 8 (16 rows)
// over half w / 8 of K (32 k-steps of mma.sync m16n8k16, n = the batch of 8).
// - W_hh stays on chip: the first REG_KS k-steps of a warp's A fragments in registers, the
//   rest in shared memory, in fragment order (a 16-byte load a lane a k-step).
// - h of the step before: each block adds 1 to the layer's progress word (a release) after
//   writing its slice of a step; before staging h_{t-1} a block waits until the word reads
//   BLOCKS·t (an acquire by thread 0, bounded by %globaltimer), then copies y[t-1] into
//   shared memory by cp.async.cg.
// - The projection x·W_ihᵀ + b of P steps at a time, inside the launch: at step t ≡ 0 (mod
//   P) the block waits until the layer below's word reads BLOCKS·(t + P) (the model input:
//   a word set before the launch), then each warp multiplies its 16 rows of W_ih over all
//   of K by P/2 of the steps (n-tiles), A fragments read once from L2 in fragment order, x
//   read from global memory after the acquire, in B-fragment order (an 8-byte load a lane
//   a k-step a step: the layer below writes its h a second time so, yf). Read as rows of
//   y, a lane's two 4-byte loads touched 8 lines each: the projection then cost ~5 µs a
//   step whatever P, bound by L1 accesses. The sums plus the bias go into xp, which the
//   same block's cells read in the next P steps.
// - -DNO_PROJECTION: the wait for the layer below kept, the projection's loads and mma
//   left out (xp as written before), to time what the projection adds to a step.
// - -DPOLLED: h of the step before read as it lands (rnncc's polled partitions' exchange),
//   not after the layer's progress word; the word still counts steps for the layer above.
// - -DSPREAD: the projection of the next P steps computed a slice of K a step, before the
//   step's wait for h, so that it runs while the other blocks finish the step before (the
//   fp32 prototype hid ~1.3 µs of ~3 so); the lag is then 2·P steps.
// - -DK_HALVES: the projection's warps split K, not the steps (W_ih read once a block, a
//   warp's chain of loads half as long); the halves' sums meet in the cells.
// - DEPTH: k-steps of the projection's operands loaded ahead of their mma (default 2).
// - -DX_STAGED (with K_HALVES): x's fragments staged in shared memory by chunks of XKC
//   k-steps, shared by a half's 8 m-tile warps instead of each reading them from L2.
#include <cuda_fp16.h>

#include "forward_common.cuh"

#ifndef H
#define H 1024
#endif
#ifndef B
#define B 8
#endif
#ifndef P
#define P 8
#endif
#ifndef REG_KS
#define REG_KS 8
#endif
#ifndef DEPTH
#define DEPTH 2                   // k-steps of the projection's operands loaded ahead
#endif
#ifndef XKC
#define XKC 2                     // k-steps of a half of K a staged x chunk (X_STAGED)
#endif
#if defined(X_STAGED) && !defined(K_HALVES)
#error "X_STAGED is built with K_HALVES"
#endif
#define UNITS 32
#define G 4
#define ROWS (G * UNITS)          // gate rows of a block
#define GH (G * H)
#define BLOCKS (H / UNITS)
#define NT 512
#define WARPS (NT / 32)
#define M_TILES (ROWS / 16)       // 8
#define KSTEPS (H / 2 / 16)       // k-steps of a warp's half of K (recurrence)
#define KSTEPS_ALL (H / 16)       // k-steps of all of K (projection)
#define HP (H + 8)                // staged h row pitch: the 8 rows' 32-bit loads in distinct banks
#define W_SHARED_BYTES (WARPS * (KSTEPS - REG_KS) * 32 * 16)
#define STEP_BYTES (B * HP * 2 + M_TILES * 32 * 16 + ROWS * B * 4)   // h_s, partial, gates
#ifdef X_STAGED
#define X_BYTES (2 * 2 * XKC * P * 32 * 8)  // two chunks of x, over h_s, partial, gates and past them
#else
#define X_BYTES 0
#endif
#define SHARED_BYTES (W_SHARED_BYTES + (STEP_BYTES > X_BYTES ? STEP_BYTES : X_BYTES))

static_assert(B == 8, "n = 8: a batch row a column of the mma");
static_assert(WARPS == 2 * M_TILES && H % 32 == 0 && P % 2 == 0 && REG_KS <= KSTEPS, "tile shape");
static_assert(B * UNITS <= NT, "a cell a thread");

__device__ __forceinline__ void mma16816(float (&d)[4], const uint4& a, unsigned b0, unsigned b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a.x), "r"(a.y), "r"(a.z), "r"(a.w), "r"(b0), "r"(b1));
}

// POLLED: h of the step before is read as it lands, as rnncc's polled partitions do
// (common.polled_exchange): y holds EMPTY (0xFFFF, a NaN no cell writes) before the launch,
// a cell stores h with a relaxed store (a computed 0xFFFF becomes 0x7FFF), and a block
// reads y[t − 1] by relaxed 16-byte loads until no half of them is EMPTY.
__device__ __forceinline__ uint4 load_relaxed16(const __half* p) {
    uint4 v;
    asm volatile("ld.relaxed.gpu.global.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p) : "memory");
    return v;
}
__device__ __forceinline__ bool has_empty(uint4 v) {
    return (__vcmpeq2(v.x, 0xFFFFFFFFu) | __vcmpeq2(v.y, 0xFFFFFFFFu) | __vcmpeq2(v.z, 0xFFFFFFFFu)
            | __vcmpeq2(v.w, 0xFFFFFFFFu)) != 0u;
}
__device__ __forceinline__ void store_h(__half* p, float v) {
    unsigned short bits = __half_as_ushort(__float2half_rn(v));
    if (bits == 0xFFFFu) bits = 0x7FFFu;
    asm volatile("st.relaxed.gpu.global.b16 [%0], %1;" :: "l"(p), "h"(bits) : "memory");
}

__device__ __forceinline__ uint4 load_nc(const uint4* p) {
    uint4 v;
    asm volatile("ld.global.nc.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
    return v;
}

// The hardware's tanh, and sigmoid(v) = (1 + tanh(v / 2)) / 2, as rnncc's fp16 kernels
// (templates/common.cuh.j2): the library's tanh sits on the cell's path.
__device__ __forceinline__ float tanh_fast(float v) {
    float r;
    asm("tanh.approx.f32 %0, %1;" : "=f"(r) : "f"(v));
    return r;
}
__device__ __forceinline__ float sigmoid_fast(float v) { return 0.5f + 0.5f * tanh_fast(0.5f * v); }

// wait_word's count form (forward_common.cuh), then a fence: the block's other threads read
// what the word's writers wrote once thread 0 has waited and the block has met.
__device__ __forceinline__ void wait_at_least(const unsigned* word, unsigned want, unsigned* status) {
    wait_word(word, want, false, status);
    asm volatile("fence.acq_rel.gpu;" ::: "memory");
}

// w_hh_f, w_ih_f: A fragments, [BLOCKS][M_TILES][H/16 k-steps over all of K][32 lanes]
// uint4 (lane l: rows l/4 and l/4 + 8 of the m-tile, K pairs 2·(l%4) and 2·(l%4) + 8);
// bias: [GH] (row 4·unit + gate); xf: the layer's input (the layer below's yf, or the
// model's input) in B-fragment order, [S][H/16 k-steps][32 lanes] uint2 (lane l: batch row
// l/4, K pairs 2·(l%4) and 2·(l%4) + 8); xp: [2][S][B][GH] fp32, this layer's projection
// (written here; the second half only with K_HALVES); y: [S][B][H]; yf: y in xf's order;
// progress: this layer's word; below: the input's word (BLOCKS·S where the input is
// given); status: a give-up flag. Words zero before the launch.
extern "C" __global__ void __launch_bounds__(NT, 1)
k_wavefront_layer(const uint4* __restrict__ w_hh_f, const uint4* __restrict__ w_ih_f,
                  const float* __restrict__ bias, const uint2* xf, float* xp, __half* y, __half* yf,
                  unsigned* progress, const unsigned* below, unsigned* status, int steps) {
    extern __shared__ __align__(16) unsigned char shared[];
    uint4* w_s = reinterpret_cast<uint4*>(shared);                                   // [WARPS][KSTEPS - REG_KS][32]
    __half* h_s = reinterpret_cast<__half*>(shared + W_SHARED_BYTES);                 // [B][HP]
    float4* partial = reinterpret_cast<float4*>(shared + W_SHARED_BYTES + B * HP * 2);  // [M_TILES][32]
    float* gates = reinterpret_cast<float*>(shared + W_SHARED_BYTES + B * HP * 2 + M_TILES * 32 * 16);  // [ROWS][B]
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, grp = lane / 4, quad = lane % 4;
    const int mt = warp % M_TILES, half = warp / M_TILES;
    const int u0 = blockIdx.x * UNITS, row0 = G * u0;  // the block's first unit and gate row

    // W_hh's fragments of this warp: its half of K, k-steps half·KSTEPS … of the H/16.
    const uint4* whh = w_hh_f + ((long long)(blockIdx.x * M_TILES + mt) * KSTEPS_ALL + half * KSTEPS) * 32 + lane;
    uint4 a_reg[REG_KS > 0 ? REG_KS : 1];
#pragma unroll
    for (int ks = 0; ks < REG_KS; ++ks) a_reg[ks] = whh[ks * 32];
    for (int ks = REG_KS; ks < KSTEPS; ++ks) w_s[(warp * (KSTEPS - REG_KS) + ks - REG_KS) * 32 + lane] = whh[ks * 32];
    const uint4* wih = w_ih_f + (long long)(blockIdx.x * M_TILES + mt) * KSTEPS_ALL * 32 + lane;
    __syncthreads();

    // The cell of thread tid < B·UNITS: batch row tid / UNITS, unit tid % UNITS (a row's
    // units adjacent: its stores of h coalesce).
    const int cb = tid / UNITS, cu = tid % UNITS;
    float c = 0.0f;

    // The projection: warp (mt, half) sums 16 rows × steps t0 + half·P/2 … (P/2 of them,
    // those below t0 + n) over k-steps [ks0, ks1) of all of K into pacc; put stores the
    // sums plus the bias into xp.
#if defined(K_HALVES) && defined(SPREAD)
#error "K_HALVES is built without SPREAD"
#endif
#ifdef K_HALVES
    // -DK_HALVES: warp (mt, half) sums its m-tile over half of K for all P steps, not over all
    // of K for half of them: W_ih's fragments are read once a block, not twice, and a warp's
    // chain of loads is half as long. The halves' sums go to the two halves of xp, and the
    // cells add them.
    constexpr int NJ = P;
    const int j0 = 0, kh0 = half * (KSTEPS_ALL / 2), kh1 = kh0 + KSTEPS_ALL / 2;
    float* xp_half = xp + (long long)half * steps * B * GH;
    const bool adds_bias = half == 0;
#else
    constexpr int NJ = P / 2;     // n-tiles (steps) of a warp
    const int j0 = half * NJ, kh0 = 0, kh1 = KSTEPS_ALL;
    float* xp_half = xp;
    const bool adds_bias = true;
#endif
    float pacc[NJ][4];
    auto clear = [&]() {
#pragma unroll
        for (int j = 0; j < NJ; ++j)
#pragma unroll
            for (int i = 0; i < 4; ++i) pacc[j][i] = 0.0f;
    };
#ifndef X_STAGED
    // A k-step's operands (W_ih's A fragment, x's B fragments of the warp's steps) are
    // loaded DEPTH k-steps before their mma: issued in order, the projection was a chain of
    // L2 round trips, one a k-step (9.4 µs a step against 4.1 without it, P-independent).
    struct Operands { uint4 a; unsigned b[NJ][2]; };
    auto fetch = [&](Operands& o, int t0, int n, int ks) {
        o.a = load_nc(wih + ks * 32);
#pragma unroll
        for (int j = 0; j < NJ; ++j) {
            if (j0 + j < n) {
                const uint2 v = xf[((long long)(t0 + j0 + j) * KSTEPS_ALL + ks) * 32 + lane];
                o.b[j][0] = v.x;
                o.b[j][1] = v.y;
            }
        }
    };
    auto project = [&](int t0, int n, int ks0, int ks1) {
        Operands ops[DEPTH];
#pragma unroll
        for (int d = 0; d < DEPTH; ++d)
            if (ks0 + d < ks1) fetch(ops[d], t0, n, ks0 + d);
        for (int ks = ks0; ks < ks1; ks += DEPTH) {
#pragma unroll
            for (int d = 0; d < DEPTH; ++d) {
                if (ks + d < ks1) {
                    const Operands cur = ops[d];
                    if (ks + d + DEPTH < ks1) fetch(ops[d], t0, n, ks + d + DEPTH);
#pragma unroll
                    for (int j = 0; j < NJ; ++j)
                        if (j0 + j < n) mma16816(pacc[j], cur.a, cur.b[j][0], cur.b[j][1]);
                }
            }
        }
    };
#endif
#ifdef X_STAGED
    // -DX_STAGED (with K_HALVES): x's fragments of XKC k-steps of each half of K, all n
    // steps, staged by cp.async into the shared memory that stages h and the step's sums
    // (free between a step's cells and the next step's staging; X_BYTES may reach past
    // them), two buffers; the 8 m-tile warps of a half then read them from there, not each
    // from L2 (8 × 128 KiB a block a phase at P=8). One block barrier a chunk: after it,
    // chunk c has landed and chunk c − 1's buffer is read.
    static_assert((KSTEPS_ALL / 2) % XKC == 0, "whole chunks");
    constexpr int X_BUF = 2 * XKC * P * 32;  // uint2 a buffer: [half][XKC][P][32 lanes]
    uint2* x_s = reinterpret_cast<uint2*>(h_s);
    auto stage_x = [&](int t0, int n, int c, int buf) {
        for (int e = tid; e < 2 * XKC * n * 16; e += NT) {  // 16-byte pieces, 16 a (step, k-step)
            const int piece = e % 16, j = e / 16 % n, kc = e / 16 / n % XKC, hf = e / 16 / n / XKC;
            const int ks = hf * (KSTEPS_ALL / 2) + c * XKC + kc;
            const uint4* src = reinterpret_cast<const uint4*>(xf + ((long long)(t0 + j) * KSTEPS_ALL + ks) * 32) + piece;
            const unsigned dst = (unsigned)__cvta_generic_to_shared(x_s + buf * X_BUF + ((hf * XKC + kc) * P + j) * 32 + 2 * piece);
            asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" :: "r"(dst), "l"(src) : "memory");
        }
        asm volatile("cp.async.commit_group;" ::: "memory");
    };
    auto project = [&](int t0, int n, int, int) {
        constexpr int CHUNKS = KSTEPS_ALL / 2 / XKC;
        stage_x(t0, n, 0, 0);
        for (int c = 0; c < CHUNKS; ++c) {
            uint4 a[XKC];  // issued before the wait (loaded a chunk ahead they cost registers: slower)
#pragma unroll
            for (int kc = 0; kc < XKC; ++kc) a[kc] = load_nc(wih + (kh0 + c * XKC + kc) * 32);
            asm volatile("cp.async.wait_group 0;" ::: "memory");
            __syncthreads();
            if (c + 1 < CHUNKS) stage_x(t0, n, c + 1, (c + 1) % 2);
            const uint2* xc = x_s + (c % 2) * X_BUF + half * XKC * P * 32 + lane;
#pragma unroll
            for (int kc = 0; kc < XKC; ++kc)
#pragma unroll
                for (int j = 0; j < NJ; ++j)
                    if (j < n) {
                        const uint2 v = xc[(kc * P + j) * 32];
                        mma16816(pacc[j], a[kc], v.x, v.y);
                    }
        }
        __syncthreads();  // the buffers read before h is staged there
    };
#endif
    // C element i: gate row grp + 8·(i >> 1) of the m-tile, batch row 2·quad + (i & 1).
    auto put = [&](int t0, int n) {
#pragma unroll
        for (int j = 0; j < NJ; ++j) {
            if (j0 + j >= n) break;
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const int r = row0 + mt * 16 + grp + 8 * (i >> 1), b = 2 * quad + (i & 1);
                xp_half[((long long)(t0 + j0 + j) * B + b) * GH + r] = pacc[j][i] + (adds_bias ? bias[r] : 0.0f);
            }
        }
    };
    auto wait_below = [&](int t_end) {
        if (tid == 0) wait_at_least(below, (unsigned)(BLOCKS * t_end), status);
        __syncthreads();
    };
#ifdef SPREAD
    // The first P steps' projection whole, before step 0; then the next P steps' a slice of
    // K a step, before the step's wait for h (so that it runs while the other blocks finish
    // the step before), once the layer below has done those steps: a lag of 2·P steps.
    static_assert(KSTEPS_ALL % P == 0, "whole k-steps a slice");
    wait_below(min(P, steps));
    clear();
    project(0, min(P, steps), 0, KSTEPS_ALL);
    put(0, min(P, steps));
    clear();
    __syncthreads();
#endif

    for (int t = 0; t < steps; ++t) {
#ifdef SPREAD
        {
            const int next = (t / P + 1) * P, n = min(P, steps - next), slice = t % P;
            if (n > 0) {
                if (slice == 0) wait_below(next + n);
                project(next, n, slice * (KSTEPS_ALL / P), (slice + 1) * (KSTEPS_ALL / P));
                if (slice == P - 1 || t == steps - 1) {  // read at step next, after the syncs below
                    put(next, n);
                    clear();
                }
            }
        }
#else
        if (t % P == 0) {  // the projection of steps t … t + n - 1
            const int n = min(P, steps - t);
            wait_below(t + n);
#ifndef NO_PROJECTION
            clear();
            project(t, n, kh0, kh1);
            put(t, n);
#endif
            __syncthreads();  // xp's rows of this block written before its cells read them
        }
#endif

        float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        if (t > 0) {
            const __half* h_prev = y + (long long)(t - 1) * B * H;
#ifdef POLLED
            // This thread's 16-byte pieces of h (items tid, tid + NT, …), each put into h_s
            // once read whole; the others read again, bounded by %globaltimer.
            static_assert(B * H / 8 <= 4 * NT, "at most 4 pieces a thread");
            unsigned missing = 0u, spins = 0u;
            unsigned long long start = 0;
#pragma unroll
            for (int i = 0; i < 4; ++i)
                if (tid + i * NT < B * H / 8) missing |= 1u << i;
            while (missing != 0u) {
#pragma unroll
                for (int i = 0; i < 4; ++i) {
                    const int e = tid + i * NT;
                    if (missing & (1u << i)) {
                        const int r = e / (H / 8), col = e % (H / 8) * 8;
                        const uint4 v = load_relaxed16(h_prev + r * H + col);
                        if (!has_empty(v)) {
                            missing &= ~(1u << i);
                            *reinterpret_cast<uint4*>(h_s + r * HP + col) = v;
                        }
                    }
                }
                if (missing != 0u && ++spins % 64 == 0) {
                    unsigned long long now;
                    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
                    if (start == 0) start = now;
                    if (*reinterpret_cast<volatile unsigned*>(status) != 0 || now - start > 500000000ull) {
                        atomicExch(status, 1u);
                        break;
                    }
                }
            }
#else
            if (tid == 0) wait_at_least(progress, (unsigned)(BLOCKS * t), status);
            __syncthreads();
            for (int e = tid; e < B * H / 8; e += NT) {
                const int r = e / (H / 8), col = e % (H / 8) * 8;
                const unsigned d = (unsigned)__cvta_generic_to_shared(h_s + r * HP + col);
                asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" :: "r"(d), "l"(h_prev + r * H + col) : "memory");
            }
            asm volatile("cp.async.commit_group;\ncp.async.wait_group 0;" ::: "memory");
#endif
            __syncthreads();
            const __half* hb = h_s + grp * HP + half * (H / 2) + 2 * quad;
#pragma unroll
            for (int ks = 0; ks < REG_KS; ++ks)
                mma16816(acc, a_reg[ks], *reinterpret_cast<const unsigned*>(hb + ks * 16),
                         *reinterpret_cast<const unsigned*>(hb + ks * 16 + 8));
#pragma unroll 4
            for (int ks = REG_KS; ks < KSTEPS; ++ks)
                mma16816(acc, w_s[(warp * (KSTEPS - REG_KS) + ks - REG_KS) * 32 + lane],
                         *reinterpret_cast<const unsigned*>(hb + ks * 16),
                         *reinterpret_cast<const unsigned*>(hb + ks * 16 + 8));
        }
        // The two halves of K meet: the upper half's sums into the lower's, which write the
        // gate pre-activations [row][batch] for the cells.
        if (half == 1) partial[mt * 32 + lane] = make_float4(acc[0], acc[1], acc[2], acc[3]);
        __syncthreads();
        if (half == 0) {
            const float4 o = partial[mt * 32 + lane];
            const int r = mt * 16 + grp, b = 2 * quad;
            gates[r * B + b] = acc[0] + o.x;
            gates[r * B + b + 1] = acc[1] + o.y;
            gates[(r + 8) * B + b] = acc[2] + o.z;
            gates[(r + 8) * B + b + 1] = acc[3] + o.w;
        }
        __syncthreads();
        if (tid < B * UNITS) {
            float4 pre = *reinterpret_cast<const float4*>(xp + ((long long)t * B + cb) * GH + row0 + G * cu);
#ifdef K_HALVES
            const float4 upper = *reinterpret_cast<const float4*>(xp + ((long long)(steps + t) * B + cb) * GH + row0 + G * cu);
            pre = make_float4(pre.x + upper.x, pre.y + upper.y, pre.z + upper.z, pre.w + upper.w);
#endif
            const float i = sigmoid_fast(gates[(G * cu + 0) * B + cb] + pre.x);
            const float f = sigmoid_fast(gates[(G * cu + 1) * B + cb] + pre.y);
            const float g = tanh_fast(gates[(G * cu + 2) * B + cb] + pre.z);
            const float o = sigmoid_fast(gates[(G * cu + 3) * B + cb] + pre.w);
            c = f * c + i * g;
            const float h = o * tanh_fast(c);
#ifdef POLLED
            store_h(y + ((long long)t * B + cb) * H + u0 + cu, h);
#else
            y[((long long)t * B + cb) * H + u0 + cu] = __float2half_rn(h);
#endif
            // h again in B-fragment order, for the layer above's projection (published by
            // the block's arrival on the progress word, as y is without POLLED).
            const int k = u0 + cu, kk = k % 16;
            yf[(((long long)t * KSTEPS_ALL + k / 16) * 32 + 4 * cb + kk % 8 / 2) * 4 + kk / 8 * 2 + kk % 2] =
                __float2half_rn(h);
        }
        __syncthreads();  // the block's h of step t written (and gates read) before the arrival
        if (tid == 0) asm volatile("red.release.gpu.global.add.u32 [%0], %1;" :: "l"(progress), "r"(1u) : "memory");
    }
}

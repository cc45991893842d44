// The floor of one step's h exchange across a grid of blocks (grid-persistent mode), three
// ways. Every block owns VALUES of h; each step it publishes them, then every block reads
// all BLOCKS·VALUES of h (as the grid kernel stages h before its product) and computes its
// next values from their sum. benchmarks/grid_exchange.py times them.
//
//   k_counter: rnncc's grid barrier today — one arrival counter and a generation word, with
//              fences — then plain loads of h.
//   k_flags:   a flag per block, stamped with the step and written after a fence (GRNN);
//              each block polls every producer's flag, then loads h.
//   k_stamped: h carries its step (Baidu's persistent RNN keeps a counter in each cache
//              line): each value is one 8-byte word {h, step}, stored and loaded as single
//              64-bit relaxed accesses, which are single-copy atomic, so a reader that sees
//              the step in a word has that step's value. The load is the wait; no fence, no
//              flag, no barrier.
//
// Every spin gives up after SPIN_LIMIT polls, or when another block has given up, and
// sets *failed, so the benchmark cannot hang.
#ifndef BLOCKS
#define BLOCKS 128
#endif
#ifndef VALUES
#define VALUES 64          // of h a block owns: BLOCKS·VALUES = H·B (8192: H=1024, B=8)
#endif
#define NT 256
#define TOTAL (BLOCKS * VALUES)
#define PER_THREAD (TOTAL / NT)
#define SPIN_LIMIT (1u << 22)  // polls (seconds at most); every 1024th also checks *failed

static_assert(TOTAL % NT == 0, "every thread reads the same number of values");

#include "exchange_common.cuh"

// k_counter and k_flags after their wait: all of h of this step, plain loads from L2,
// summed in block_sum's order, gives this thread's next value.
__device__ float next_from_plain(const float* ht, float* scratch, float mine) {
    float partial = 0.f;
    for (int i = 0; i < PER_THREAD; ++i) partial += __ldcg(ht + i * NT + threadIdx.x);
    const float s = block_sum(partial, scratch);
    return threadIdx.x < VALUES ? next_value(s, blockIdx.x, threadIdx.x) : mine;
}

extern "C" __global__ void __launch_bounds__(NT) k_counter(float* h, unsigned* barrier,
                                                           unsigned* failed, float* out, int steps) {
    __shared__ float scratch[NT];
    __shared__ int stop;
    unsigned generation = 0;
    float mine = threadIdx.x < VALUES ? next_value(0.f, blockIdx.x, threadIdx.x) : 0.f;
    for (int t = 0; t < steps; ++t) {
        float* ht = h + (t & 1) * TOTAL;
        if (threadIdx.x < VALUES) ht[blockIdx.x * VALUES + threadIdx.x] = mine;
        __syncthreads();
        if (threadIdx.x == 0) {
            stop = 0;
            __threadfence();
            if (atomicAdd(&barrier[0], 1u) == BLOCKS - 1) {
                barrier[0] = 0;
                __threadfence();
                atomicAdd(&barrier[1], 1u);
            } else {
                unsigned spins = 0;
                while (load_volatile(&barrier[1]) == generation)
                    if (give_up(spins, failed)) { stop = 1; break; }
            }
            __threadfence();
        }
        ++generation;
        __syncthreads();
        if (stop) return;
        mine = next_from_plain(ht, scratch, mine);
    }
    if (threadIdx.x < VALUES) out[blockIdx.x * VALUES + threadIdx.x] = mine;
}

extern "C" __global__ void __launch_bounds__(NT) k_flags(float* h, unsigned* flags,
                                                         unsigned* failed, float* out, int steps) {
    __shared__ float scratch[NT];
    __shared__ int stop;
    float mine = threadIdx.x < VALUES ? next_value(0.f, blockIdx.x, threadIdx.x) : 0.f;
    if (threadIdx.x == 0) stop = 0;
    for (int t = 0; t < steps; ++t) {
        float* ht = h + (t & 1) * TOTAL;
        if (threadIdx.x < VALUES) ht[blockIdx.x * VALUES + threadIdx.x] = mine;
        __syncthreads();
        if (threadIdx.x == 0) {
            __threadfence();
            asm volatile("st.release.gpu.global.u32 [%0], %1;" :: "l"(flags + blockIdx.x), "r"(t + 1) : "memory");
        }
        // Thread j < BLOCKS waits for producer j's flag of this step.
        if (threadIdx.x < BLOCKS) {
            unsigned spins = 0, f;
            do {
                asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(f) : "l"(flags + threadIdx.x) : "memory");
                if (give_up(spins, failed)) { stop = 1; break; }
            } while (f < (unsigned)(t + 1));
        }
        __syncthreads();
        if (stop) return;
        mine = next_from_plain(ht, scratch, mine);
    }
    if (threadIdx.x < VALUES) out[blockIdx.x * VALUES + threadIdx.x] = mine;
}

extern "C" __global__ void __launch_bounds__(NT) k_stamped(unsigned long long* h, unsigned* failed,
                                                           float* out, int steps) {
    __shared__ float scratch[NT];
    __shared__ int stop;
    float mine = threadIdx.x < VALUES ? next_value(0.f, blockIdx.x, threadIdx.x) : 0.f;
    if (threadIdx.x == 0) stop = 0;
    __syncthreads();
    for (int t = 0; t < steps; ++t) {
        // Two buffers: a word of step t is overwritten only at step t + 2, after every
        // block has read it (each block has then published step t + 1, which needed it).
        unsigned long long* ht = h + (t & 1) * TOTAL;
        const unsigned stamp = t + 1;  // 0 is "never written" (the buffers start zeroed)
        if (threadIdx.x < VALUES) {
            const unsigned long long word = ((unsigned long long)stamp << 32) | __float_as_uint(mine);
            asm volatile("st.relaxed.gpu.global.b64 [%0], %1;" :: "l"(ht + blockIdx.x * VALUES + threadIdx.x), "l"(word) : "memory");
        }
        float partial = 0.f;
        bool ok = true;
        for (int i = 0; i < PER_THREAD && ok; ++i) {
            unsigned long long word;
            unsigned spins = 0;
            do {
                asm volatile("ld.relaxed.gpu.global.b64 %0, [%1];" : "=l"(word) : "l"(ht + i * NT + threadIdx.x) : "memory");
                if (give_up(spins, failed)) { stop = 1; ok = false; break; }
            } while ((unsigned)(word >> 32) != stamp);
            partial += __uint_as_float((unsigned)word);
        }
        const float s = block_sum(partial, scratch);
        if (stop) return;
        if (threadIdx.x < VALUES) mine = next_value(s, blockIdx.x, threadIdx.x);
    }
    if (threadIdx.x < VALUES) out[blockIdx.x * VALUES + threadIdx.x] = mine;
}

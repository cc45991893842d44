// What the forward prototypes (forward_ksplit.cu, forward_registers.cu, wavefront*.cu) share:
// a 16-byte cp.async from L2, the sigmoid, rnncc's grid barrier's arrival scheme
// (templates/common.cuh.j2) and a wait on a word, both bounded. The prototypes launch
// without the cooperative attribute, so a block that waits past ~0.5 s (not all blocks
// resident) sets status[0] and stops waiting, and the run ends for the script to report it.
#pragma once

__device__ __forceinline__ void stage16(float* dst, const float* src) {
    const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" :: "r"(d), "l"(src) : "memory");
}

__device__ __forceinline__ float sigmoid(float v) { return 1.0f / (1.0f + __expf(-v)); }

__device__ __forceinline__ void grid_barrier(unsigned* barrier, unsigned* status) {
    __syncthreads();
    if (threadIdx.x == 0) {
        const unsigned add = blockIdx.x == 0 ? 0x80000000u - (gridDim.x - 1) : 1u;
        unsigned before, now;
        unsigned long long start, clock;
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
        asm volatile("atom.add.release.gpu.global.u32 %0, [%1], %2;" : "=r"(before) : "l"(barrier), "r"(add) : "memory");
        do {  // once a barrier gave up, the others do not wait: the run ends, its h wrong
            asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(now) : "l"(barrier) : "memory");
            asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(clock));
            if (*reinterpret_cast<volatile unsigned*>(status) != 0 || clock - start > 500000000ull) {
                atomicExch(status, 1u);
                break;
            }
        } while (((before ^ now) & 0x80000000u) == 0);
        asm volatile("fence.acq_rel.gpu;" ::: "memory");
    }
    __syncthreads();
}

// Polls until *word has passed `want` (generation: its top bit differs from `before`'s;
// count: *word >= want; an acquire), bounded as grid_barrier above.
__device__ __forceinline__ void wait_word(const unsigned* word, unsigned want, bool generation, unsigned* status) {
    unsigned now;
    unsigned long long start, clock;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    for (;;) {
        asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(now) : "l"(word) : "memory");
        if (generation ? ((want ^ now) & 0x80000000u) != 0 : now >= want) break;
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(clock));
        if (*reinterpret_cast<volatile unsigned*>(status) != 0 || clock - start > 500000000ull) {
            atomicExch(status, 1u);
            break;
        }
    }
}

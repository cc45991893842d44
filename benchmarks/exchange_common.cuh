// What the exchange floors (grid_exchange.cu, cross_cluster_exchange.cu) share: each block's
// next values from the sum of all of h, the sum taken in one fixed order, and the bounded
// spin. Sharing them is what lets cross_cluster_exchange.py check k_cross against
// grid_exchange's k_flags bit for bit. The including file defines NT (threads a block),
// TOTAL (values of h), VALUES (a block's) and SPIN_LIMIT (polls before a spin gives up).
#pragma once

__device__ __forceinline__ float next_value(float sum, int block, int i) {
    return sum * (1.0f / TOTAL) + 1e-3f * (block * VALUES + i);
}

__device__ __forceinline__ unsigned load_volatile(const unsigned* p) {
    return *reinterpret_cast<const volatile unsigned*>(p);
}

// True when a spin must stop: past its bound, or another block gave up (checked every
// 1024th poll); sets *failed either way, so that no run can hang.
__device__ __forceinline__ bool give_up(unsigned& spins, unsigned* failed) {
    ++spins;
    if (spins > SPIN_LIMIT || ((spins & 1023u) == 0 && load_volatile(failed))) {
        atomicExch(failed, 1u);
        return true;
    }
    return false;
}

// Sum of all h that this block reads, in a fixed order: the threads' partials (thread j
// reads every NT-th value from j) summed in thread order.
__device__ float block_sum(float partial, float* scratch) {
    scratch[threadIdx.x] = partial;
    __syncthreads();
    float s = 0.f;
    for (int j = 0; j < NT; ++j) s += scratch[j];
    __syncthreads();
    return s;
}

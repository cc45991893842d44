// What the prototypes that stage rows by tensor-map copies share (forward_step.cu and
// ksplit_step.cu with -DTMA): an mbarrier's wait, and lane_product (lane_product.cuh) over
// rows as a copy with the 128-byte swizzle puts them.
#pragma once

#include "lane_product.cuh"

// Wait until the mbarrier at shared address `bar` completes the phase of parity `parity`.
__device__ __forceinline__ void mbar_wait(unsigned bar, unsigned parity) {
    asm volatile("{\n.reg .pred p;\nWAIT_%=:\nmbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n@!p bra WAIT_%=;\n}"
                 :: "r"(bar), "r"(parity) : "memory");
}

// lane_product over a chunk as tensor-map copies of boxes of 32 floats × ROWS rows put it:
// [boxes][ROWS rows][32 floats], the 16-byte unit j of row r at j ^ (r % 8) (the 128-byte
// swizzle; the buffer 1024-byte aligned). A lane's rows rg + 8r all have r % 8 = rg. k0: the
// warp's first K row in the chunk; w: the weights' K rows (WPITCH floats apart) at k0 and
// the lane's first column.
template <int R, int C, int KW, int ROWS, int WPITCH>
__device__ __forceinline__ void lane_product_swizzled(float (&acc)[R][C], const float* buf, int k0, const float* w,
                                                      int rg) {
    static_assert(KW % 4 == 0 && C % 4 == 0, "whole float4s");
#pragma unroll
    for (int kk = 0; kk < KW; kk += 4) {
        const int k = k0 + kk, box = k / 32, unit = (k % 32 / 4) ^ rg;
        float4 xv[R];
#pragma unroll
        for (int r = 0; r < R; ++r) xv[r] = *reinterpret_cast<const float4*>(buf + (box * ROWS + rg + 8 * r) * 32 + unit * 4);
        lane_fma4<R, C, WPITCH>(acc, xv, w + kk * WPITCH);
    }
}

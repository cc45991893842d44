// The product step the prototypes ksplit_step.cu and forward_step.cu share (and
// templates/backward_ksplit.cu.j2 runs): a lane of row group rg sums, for its R rows
// rg + 8r of a staged chunk and C consecutive columns of a resident weight tile, the KW
// K rows of the chunk its warp owns. `rows`: the chunk's rows (PITCH floats apart), at the
// warp's first K row; `w`: the weights' K rows (WPITCH floats apart), at the warp's first K
// row and the lane's first column. A row's 4 K values are one float4 read that the lanes of
// a row group share; a K row's C weights are C/4 float4 reads.
#pragma once

// acc[r][c] += xv[r].{x,y,z,w} · w[j][c] for the 4 K rows j of xv (WPITCH floats apart in
// w, at the lane's first column): C/4 float4 reads a K row.
template <int R, int C, int WPITCH>
__device__ __forceinline__ void lane_fma4(float (&acc)[R][C], const float4 (&xv)[R], const float* w) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        float wv[C];
#pragma unroll
        for (int c = 0; c < C; c += 4) {
            const float4 v = *reinterpret_cast<const float4*>(w + j * WPITCH + c);
            wv[c] = v.x; wv[c + 1] = v.y; wv[c + 2] = v.z; wv[c + 3] = v.w;
        }
#pragma unroll
        for (int r = 0; r < R; ++r) {
            const float x = j == 0 ? xv[r].x : j == 1 ? xv[r].y : j == 2 ? xv[r].z : xv[r].w;
#pragma unroll
            for (int c = 0; c < C; ++c) acc[r][c] += x * wv[c];
        }
    }
}

template <int R, int C, int KW, int PITCH, int WPITCH>
__device__ __forceinline__ void lane_product(float (&acc)[R][C], const float* rows, const float* w, int rg) {
    static_assert(KW % 4 == 0 && C % 4 == 0, "whole float4s");
#pragma unroll
    for (int kk = 0; kk < KW; kk += 4) {
        float4 xv[R];
#pragma unroll
        for (int r = 0; r < R; ++r) xv[r] = *reinterpret_cast<const float4*>(rows + (rg + 8 * r) * PITCH + kk);
        lane_fma4<R, C, WPITCH>(acc, xv, w + kk * WPITCH);
    }
}

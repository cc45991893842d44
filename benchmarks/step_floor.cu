// The floor of one recurrent step in one block (a cluster of one), GRU, batch 1: the
// structure of rnncc's FMA cluster kernel today against the structure issue 14 plans.
// benchmarks/step_floor.py builds, checks and times both.
//
//   k_smem:  threads (unit, k-split slice); W_hhᵀ in shared memory; per step the K-split
//            partials go through shared memory and one thread per unit sums them in order,
//            runs the cell and publishes h; then the block gathers h for the next step:
//            three block barriers a step (what recurrent_cluster.cu.j2 does at cluster=1).
//   k_lanes: LANES adjacent lanes of a warp per unit, each holding its k's of the unit's
//            gates in registers; the partials meet by shfl_xor; the lane that ends with
//            the sum runs the cell and writes h into the next step's buffer: one block
//            barrier a step (GRNN's reduction, Baidu's registers).
//   k_ahead: k_lanes with the projection loaded AHEAD steps ahead (a ring of registers,
//            the step loop unrolled by AHEAD) instead of one: a step at the floor is
//            shorter than a load from L2 or DRAM, which one step ahead leaves exposed.
//
// Both read the projection xproj[t][unit][gate] (biases folded in, b_hn = 0) one step
// ahead, start from h0 = 0 and write y[t][unit].
#ifndef H
#define H 100
#endif
#ifndef KS
#define KS 8          // k_smem: K split
#endif
#ifndef LANES
#define LANES 8       // k_lanes: lanes per unit (a power of two, at most 32)
#endif
#ifndef AHEAD
#define AHEAD 4       // k_ahead: steps the projection is loaded ahead
#endif
#define G 3
#define KP ((H + 31) / 32 * 32)      // K padded
#define SMEM_THREADS (H * KS)
#define LANE_THREADS (H * LANES)
#define K_PER_LANE ((H + LANES - 1) / LANES)

__device__ __forceinline__ float sigmoid(float x) { return 1.0f / (1.0f + __expf(-x)); }

__device__ __forceinline__ float gru(const float* xp, const float* hw, float h_old) {
    const float r = sigmoid(xp[0] + hw[0]);
    const float z = sigmoid(xp[1] + hw[1]);
    const float n = tanhf(xp[2] + r * hw[2]);
    return (1.0f - z) * n + z * h_old;
}

// w: [H][G][H] (unit, gate, k), as W_hh rows of PyTorch grouped by unit.
extern "C" __global__ void __launch_bounds__(SMEM_THREADS) k_smem(const float* w, const float* xproj,
                                                                   float* y, int steps) {
    extern __shared__ float shared[];
    float* w_s = shared;                         // [KP][H·G]
    float* h_full = w_s + KP * H * G;            // [KP]
    float* h_own = h_full + KP;                  // [H]
    float* partial = h_own + H;                  // [KS-1][G][H]
    const int u = threadIdx.x % H, tz = threadIdx.x / H;
    for (int e = threadIdx.x; e < KP * H * G; e += SMEM_THREADS) {
        const int k = e / (H * G), col = e % (H * G);
        w_s[e] = k < H ? w[(col / G * G + col % G) * H + k] : 0.f;
    }
    for (int k = threadIdx.x; k < KP; k += SMEM_THREADS) h_full[k] = 0.f;
    float xp[G];
    if (tz == 0)
        for (int g = 0; g < G; ++g) xp[g] = xproj[u * G + g];
    __syncthreads();
    for (int t = 0; t < steps; ++t) {
        float acc[G] = {0.f, 0.f, 0.f};
#pragma unroll 4
        for (int k = tz; k < KP; k += KS) {
            const float hv = h_full[k];
#pragma unroll
            for (int g = 0; g < G; ++g) acc[g] = fmaf(hv, w_s[k * H * G + u * G + g], acc[g]);
        }
        if (tz > 0)
            for (int g = 0; g < G; ++g) partial[((tz - 1) * G + g) * H + u] = acc[g];
        __syncthreads();
        if (tz == 0) {
            for (int s = 0; s < KS - 1; ++s)
                for (int g = 0; g < G; ++g) acc[g] += partial[(s * G + g) * H + u];
            const float h_new = gru(xp, acc, h_full[u]);
            h_own[u] = h_new;
            y[(long long)t * H + u] = h_new;
            if (t + 1 < steps)
                for (int g = 0; g < G; ++g) xp[g] = xproj[(long long)(t + 1) * H * G + u * G + g];
        }
        __syncthreads();
        for (int k = threadIdx.x; k < H; k += SMEM_THREADS) h_full[k] = h_own[k];
        __syncthreads();
    }
}

// The lanes kernels' start: unit u's weights for this lane's k (every LANES-th) in
// registers, both h buffers zeroed.
__device__ __forceinline__ void lanes_prologue(const float* w, int u, int lane, float (&w_reg)[G][K_PER_LANE],
                                               float* h_buf) {
#pragma unroll
    for (int g = 0; g < G; ++g)
#pragma unroll
        for (int j = 0; j < K_PER_LANE; ++j) {
            const int k = j * LANES + lane;
            w_reg[g][j] = k < H ? w[(u * G + g) * H + k] : 0.f;
        }
    for (int k = threadIdx.x; k < 2 * K_PER_LANE * LANES; k += LANE_THREADS) h_buf[k] = 0.f;
}

// A step's product of the lanes kernels: this lane's k of h times its weights, the
// LANES partial sums met by shuffles (every lane ends with the sum).
__device__ __forceinline__ void lanes_product(const float* h, const float (&w_reg)[G][K_PER_LANE], int lane,
                                              unsigned mask, float (&acc)[G]) {
#pragma unroll
    for (int g = 0; g < G; ++g) acc[g] = 0.f;
#pragma unroll
    for (int j = 0; j < K_PER_LANE; ++j) {
        const float hv = h[j * LANES + lane];
#pragma unroll
        for (int g = 0; g < G; ++g) acc[g] = fmaf(hv, w_reg[g][j], acc[g]);
    }
#pragma unroll
    for (int off = LANES / 2; off > 0; off >>= 1)
#pragma unroll
        for (int g = 0; g < G; ++g) acc[g] += __shfl_xor_sync(mask, acc[g], off);
}

extern "C" __global__ void __launch_bounds__(LANE_THREADS) k_lanes(const float* w, const float* xproj,
                                                                    float* y, int steps) {
    __shared__ float h_buf[2][K_PER_LANE * LANES];
    const int u = threadIdx.x / LANES, lane = threadIdx.x % LANES;
    float w_reg[G][K_PER_LANE];
    lanes_prologue(w, u, lane, w_reg, &h_buf[0][0]);
    float xp[G];
    if (lane == 0)
        for (int g = 0; g < G; ++g) xp[g] = xproj[u * G + g];
    __syncthreads();
    const unsigned mask = __activemask();  // the last warp may be partial (H·LANES not a multiple of 32)
    for (int t = 0; t < steps; ++t) {
        const float* h = h_buf[t & 1];
        float acc[G];
        lanes_product(h, w_reg, lane, mask, acc);
        if (lane == 0) {
            const float h_new = gru(xp, acc, h[u]);
            h_buf[(t + 1) & 1][u] = h_new;
            y[(long long)t * H + u] = h_new;
            if (t + 1 < steps)
                for (int g = 0; g < G; ++g) xp[g] = xproj[(long long)(t + 1) * H * G + u * G + g];
        }
        __syncthreads();
    }
}

extern "C" __global__ void __launch_bounds__(LANE_THREADS) k_ahead(const float* w, const float* xproj,
                                                                    float* y, int steps) {
    __shared__ float h_buf[2][K_PER_LANE * LANES];
    const int u = threadIdx.x / LANES, lane = threadIdx.x % LANES;
    float w_reg[G][K_PER_LANE];
    lanes_prologue(w, u, lane, w_reg, &h_buf[0][0]);
    float xp[AHEAD][G];
#pragma unroll
    for (int a = 0; a < AHEAD; ++a)
#pragma unroll
        for (int g = 0; g < G; ++g)
            xp[a][g] = (lane == 0 && a < steps) ? xproj[(long long)a * H * G + u * G + g] : 0.f;
    __syncthreads();
    const unsigned mask = __activemask();
    for (int t0 = 0; t0 < steps; t0 += AHEAD) {
#pragma unroll
        for (int a = 0; a < AHEAD; ++a) {
            const int t = t0 + a;
            if (t >= steps) break;
            const float* h = h_buf[t & 1];
            float acc[G];
            lanes_product(h, w_reg, lane, mask, acc);
            if (lane == 0) {
                const float h_new = gru(xp[a], acc, h[u]);
                h_buf[(t + 1) & 1][u] = h_new;
                y[(long long)t * H + u] = h_new;
                if (t + AHEAD < steps)
#pragma unroll
                    for (int g = 0; g < G; ++g) xp[a][g] = xproj[(long long)(t + AHEAD) * H * G + u * G + g];
            }
            __syncthreads();
        }
    }
}

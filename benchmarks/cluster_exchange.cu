// The floor of one step's h exchange in a thread-block cluster: every thread of every
// block sends one 4-byte value to every block of its cluster each step, then reads what
// all peers sent. Two ways to publish; benchmarks/cluster_exchange.py times them.
#include <cooperative_groups.h>
namespace cg = cooperative_groups;
#ifndef CL
#define CL 4
#endif
#define NT 256

__device__ __forceinline__ unsigned smem(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }

// A: DSMEM stores + cg cluster.sync (barrier.cluster.arrive.release + wait.acquire)
extern "C" __global__ void __cluster_dims__(CL,1,1) __launch_bounds__(NT) k_sync(float* out, int steps) {
    __shared__ float buf[2][CL * NT];
    cg::cluster_group c = cg::this_cluster();
    const int rank = c.block_rank();
    float v = threadIdx.x * 1e-3f + rank;
    for (int i = threadIdx.x; i < 2 * CL * NT; i += NT) (&buf[0][0])[i] = 0.f;
    c.sync();
    for (int t = 0; t < steps; ++t) {
        float* nb = buf[(t + 1) & 1];
        for (int r = 0; r < CL; ++r) c.map_shared_rank(nb, r)[rank * NT + threadIdx.x] = v;
        c.sync();
        float s = 0.f;
        for (int r = 0; r < CL; ++r) s += nb[r * NT + threadIdx.x];
        v = s * 0.25f + 0.5f;
    }
    c.sync();
    out[(blockIdx.x) * NT + threadIdx.x] = v;
}

// C: st.async with mbarrier complete_tx into the peer's buffer; each block waits on its own
// mbarrier of that buffer (expect_tx = all peers' bytes). No cluster barrier per step.
extern "C" __global__ void __cluster_dims__(CL,1,1) __launch_bounds__(NT) k_async(float* out, int steps) {
    __shared__ float buf[2][CL * NT];
    __shared__ __align__(8) unsigned long long bar[2];
    cg::cluster_group c = cg::this_cluster();
    const int rank = c.block_rank();
    float v = threadIdx.x * 1e-3f + rank;
    if (threadIdx.x == 0) {
        for (int i = 0; i < 2; ++i) asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(smem(&bar[i])));
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    c.sync();
    for (int t = 0; t < steps; ++t) {
        const int p = (t + 1) & 1;
        const unsigned mybar = smem(&bar[p]);
        if (threadIdx.x == 0)
            asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(mybar), "r"(CL * NT * 4) : "memory");
        const unsigned dst_local = smem(&buf[p][rank * NT + threadIdx.x]);
        for (int r = 0; r < CL; ++r) {
            unsigned dst, rbar;
            asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(dst) : "r"(dst_local), "r"(r));
            asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(rbar) : "r"(mybar), "r"(r));
            asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%0], %1, [%2];"
                         :: "r"(dst), "r"(__float_as_uint(v)), "r"(rbar) : "memory");
        }
        // phase of buffer p: it completes once per two steps
        const unsigned parity = (t >> 1) & 1;
        unsigned done = 0;
        while (!done)
            asm volatile("{ .reg .pred P; mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 P, [%1], %2; selp.u32 %0, 1, 0, P; }"
                         : "=r"(done) : "r"(mybar), "r"(parity) : "memory");
        float s = 0.f;
        for (int r = 0; r < CL; ++r) s += buf[p][r * NT + threadIdx.x];
        v = s * 0.25f + 0.5f;
    }
    c.sync();
    out[(blockIdx.x) * NT + threadIdx.x] = v;
}

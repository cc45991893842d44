// Thread-block cluster helpers the prototypes share (cross_cluster_exchange.cu,
// staging_floor.cu): the block's rank in its cluster, a barrier of all the cluster's threads
// (release/acquire: stores into a peer's shared memory before it are seen after it), and
// stores into a peer's shared memory at the address of the same variable there.
#pragma once
#include <cstdint>

__device__ __forceinline__ unsigned cluster_rank() {
    unsigned r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    return r;
}

__device__ __forceinline__ void cluster_sync() {
    asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}

__device__ __forceinline__ unsigned peer_address(const void* local, unsigned peer) {
    unsigned remote;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;"
                 : "=r"(remote) : "r"((unsigned)__cvta_generic_to_shared(local)), "r"(peer));
    return remote;
}

__device__ __forceinline__ void store_peer_16(const void* local, unsigned peer, uint4 v) {
    asm volatile("st.shared::cluster.v4.u32 [%0], {%1, %2, %3, %4};"
                 :: "r"(peer_address(local, peer)), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w) : "memory");
}

__device__ __forceinline__ void store_peer_u32(const void* local, unsigned peer, unsigned v) {
    asm volatile("st.shared::cluster.u32 [%0], %1;" :: "r"(peer_address(local, peer)), "r"(v) : "memory");
}

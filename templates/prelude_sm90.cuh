// moegen prelude for sm_90a: PTX wrappers for the Hopper asynchronous
// machinery (mbarrier, TMA, wgmma, setmaxnreg, fences). Only kernels rendered
// for opt.arch == "sm_90a" include it; no toolkit headers.
#ifndef MOEGEN_PRELUDE_SM90
#define MOEGEN_PRELUDE_SM90

// A CUtensorMap as the kernel sees it: 128 opaque bytes, 64-byte aligned,
// passed by value as a __grid_constant__ parameter (TMA reads it in place).
struct __align__(64) tensor_map_t { u64 opaque[16]; };

// ---------------------------------------------------------------- mbarrier
__device__ __forceinline__ void mbar_init(u32 bar, u32 count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}
// Makes initialized barriers visible to the async proxy (TMA) and the CTA.
__device__ __forceinline__ void mbar_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}
__device__ __forceinline__ void mbar_arrive(u32 bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}
// Arrives and sets the bytes the current phase waits for (TMA completes them).
__device__ __forceinline__ void mbar_arrive_expect_tx(u32 bar, u32 bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes)
               : "memory");
}
// Spins until the phase with the given parity has completed. A fresh barrier
// is in phase 0, so waiting for parity 1 returns at once.
__device__ __forceinline__ void mbar_wait(u32 bar, u32 parity) {
  u32 done;
  do {
    asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; "
                 "selp.u32 %0, 1, 0, p; }"
                 : "=r"(done)
                 : "r"(bar), "r"(parity)
                 : "memory");
  } while (!done);
}

// ---------------------------------------------------------------- TMA
__device__ __forceinline__ void tma_prefetch_map(const tensor_map_t *map) {
  asm volatile("prefetch.tensormap [%0];" ::"l"(map) : "memory");
}
// L2 eviction priority of a TMA load. L2_DEFAULT issues the load without a
// hint: an explicit evict_normal policy measured slower than none (Mixtral
// gemm2 at T = 16384: 7.3-8.1 ms against 6.6, bench/RESULTS.md run 7).
enum L2Priority { L2_DEFAULT = 0, L2_FIRST = 1, L2_LAST = 2 };
struct L2Hint {
  u64 policy; // createpolicy value, when on
  bool on;
};
__device__ __forceinline__ L2Hint l2_hint(int priority) {
  L2Hint h = {0, priority != L2_DEFAULT};
  if (priority == L2_LAST) asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(h.policy));
  else if (priority == L2_FIRST) asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(h.policy));
  return h;
}
// Box at coordinates (c0 innermost, c1) of a 2-D map into shared memory;
// completes `bar`'s transaction bytes. Out-of-bounds elements read as zero.
__device__ __forceinline__ void tma_load_2d(u32 dst, const tensor_map_t *map, u32 bar, int c0,
                                            int c1, L2Hint h) {
  if (h.on)
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                 ".L2::cache_hint [%0], [%1, {%3, %4}], [%2], %5;" ::"r"(dst),
                 "l"(map), "r"(bar), "r"(c0), "r"(c1), "l"(h.policy)
                 : "memory");
  else
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%3, %4}], [%2];" ::"r"(dst),
                 "l"(map), "r"(bar), "r"(c0), "r"(c1)
                 : "memory");
}
__device__ __forceinline__ void tma_load_3d(u32 dst, const tensor_map_t *map, u32 bar, int c0,
                                            int c1, int c2, L2Hint h) {
  if (h.on)
    asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                 ".L2::cache_hint [%0], [%1, {%3, %4, %5}], [%2], %6;" ::"r"(dst),
                 "l"(map), "r"(bar), "r"(c0), "r"(c1), "r"(c2), "l"(h.policy)
                 : "memory");
  else
    asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%3, %4, %5}], [%2];" ::"r"(dst),
                 "l"(map), "r"(bar), "r"(c0), "r"(c1), "r"(c2)
                 : "memory");
}

// Box in shared memory at src (the map's layout and swizzle) to global
// memory at coordinates (c0 innermost, c1, c2) of a 3-D map; elements out
// of the map's bounds are not written. Asynchronous: bulk_commit closes a
// group of such stores, bulk_wait_read<N> waits until at most N groups
// still read their shared memory, bulk_wait<N> until at most N are not
// complete. Shared memory written by threads must be made visible to it
// first (fence.proxy.async.shared::cta, then a barrier).
__device__ __forceinline__ void tma_store_3d(const tensor_map_t *map, u32 src, int c0, int c1, int c2) {
  asm volatile("cp.async.bulk.tensor.3d.global.shared::cta.bulk_group [%0, {%2, %3, %4}], [%1];" ::"l"(map),
               "r"(src), "r"(c0), "r"(c1), "r"(c2)
               : "memory");
}
__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;" ::: "memory"); }
template <int N> __device__ __forceinline__ void bulk_wait_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(N) : "memory");
}
template <int N> __device__ __forceinline__ void bulk_wait() {
  asm volatile("cp.async.bulk.wait_group %0;" ::"n"(N) : "memory");
}

// ---------------------------------------------------------------- wgmma
// Shared-memory matrix descriptor of a K-major operand tile written by TMA
// with the 128-byte swizzle: rows of 128 bytes (64 bf16 of K), 8-row core
// groups 1024 bytes apart (stride byte offset), leading byte offset unused
// (16), layout type 1 = 128B swizzle. The tile must be 1024-byte aligned;
// stepping K by 16 elements adds 32 bytes (2 in the >> 4 address field).
__device__ __forceinline__ u64 wgmma_desc_sw128(u32 addr) {
  return (u64)((addr & 0x3ffff) >> 4) | ((u64)(16 >> 4) << 16) | ((u64)(1024 >> 4) << 32) |
         (1ull << 62);
}
// Orders register accesses before the next wgmma.mma_async of the warpgroup.
__device__ __forceinline__ void wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
}
__device__ __forceinline__ void wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
}
// Waits until at most N committed wgmma groups of this thread are pending.
template <int N> __device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}

// ---------------------------------------------------------------- registers
// Moves registers between warpgroups (all threads of a warpgroup execute it).
template <int R> __device__ __forceinline__ void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(R));
}
template <int R> __device__ __forceinline__ void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(R));
}

#endif // MOEGEN_PRELUDE_SM90

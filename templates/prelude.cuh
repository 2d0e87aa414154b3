// moegen prelude: device helpers shared by every generated kernel.
// Self-contained (no toolkit headers), so NVRTC compiles it in milliseconds
// and nvcc compiles the generated .cu as it is.
typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;

// Kernel selection: each kernel's definition sits in #if MOEGEN_WANT(id)
// (abi.want in the templates; id = its row in moegen/abi.def). The JIT
// compiles one kernel a program, with MOEGEN_UNIT and MOEGEN_KERNEL
// defined, so a unit's kernels compile in parallel; without MOEGEN_KERNEL
// every kernel of the unit compiles.
#ifdef MOEGEN_KERNEL
#define MOEGEN_WANT(id) (MOEGEN_KERNEL == (id))
#else
#define MOEGEN_WANT(id) 1
#endif

#define MOEGEN_FULL_MASK 0xffffffffu
#define MOEGEN_INF __int_as_float(0x7f800000)

// ---------------------------------------------------------------- 16-bit floats
// bf16 and fp16 travel as raw u16; math is always fp32.
struct bf16_t { u16 bits; };
struct fp16_t { u16 bits; };

__device__ __forceinline__ float to_f32(float x) { return x; }
__device__ __forceinline__ float to_f32(bf16_t x) { return __uint_as_float((u32)x.bits << 16); }
__device__ __forceinline__ float to_f32(fp16_t x) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(x.bits));
  return f;
}

template <typename T> __device__ __forceinline__ T from_f32(float x);
template <> __device__ __forceinline__ float from_f32<float>(float x) { return x; }
template <> __device__ __forceinline__ bf16_t from_f32<bf16_t>(float x) {
  bf16_t r;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(r.bits) : "f"(x));
  return r;
}
template <> __device__ __forceinline__ fp16_t from_f32<fp16_t>(float x) {
  fp16_t r;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(r.bits) : "f"(x));
  return r;
}

// ---------------------------------------------------------------- vector access
// N consecutive elements moved as one access of N*sizeof(T) bytes (<= 16);
// the caller guarantees the alignment (plan.lua picks N from E and V).
template <int BYTES> struct raw_vec;
template <> struct raw_vec<1> { typedef u8 type; };
template <> struct raw_vec<2> { typedef u16 type; };
template <> struct raw_vec<4> { typedef u32 type; };
template <> struct raw_vec<8> { typedef u64 type; };
struct __align__(16) u32x4 { u32 a, b, c, d; };
template <> struct raw_vec<16> { typedef u32x4 type; };

template <typename T, int N> struct vec_of {
  union U {
    typename raw_vec<N * sizeof(T)>::type raw;
    T e[N];
  } u;
};

template <typename T, int N>
__device__ __forceinline__ void load_vec(const T *p, T *out) {
  vec_of<T, N> v;
  v.u.raw = *reinterpret_cast<const typename raw_vec<N * sizeof(T)>::type *>(p);
#pragma unroll
  for (int i = 0; i < N; i++) out[i] = v.u.e[i];
}

template <typename T, int N>
__device__ __forceinline__ void store_vec(T *p, const T (&in)[N]) {
  vec_of<T, N> v;
#pragma unroll
  for (int i = 0; i < N; i++) v.u.e[i] = in[i];
  *reinterpret_cast<typename raw_vec<N * sizeof(T)>::type *>(p) = v.u.raw;
}

// Bit b of the low 4 bits of x -> byte b (0 or 1) of the result.
__device__ __forceinline__ u32 spread_bits4(u32 x) { return (x * 0x00204081u) & 0x01010101u; }

// ---------------------------------------------------------------- warp reductions
// Butterfly over aligned segments of W lanes (W a power of two <= 32): every
// lane of the segment ends with the same result.
template <int W> __device__ __forceinline__ float seg_max(float x) {
#pragma unroll
  for (int o = W / 2; o > 0; o /= 2) x = fmaxf(x, __shfl_xor_sync(MOEGEN_FULL_MASK, x, o));
  return x;
}
template <int W> __device__ __forceinline__ float seg_sum(float x) {
#pragma unroll
  for (int o = W / 2; o > 0; o /= 2) x += __shfl_xor_sync(MOEGEN_FULL_MASK, x, o);
  return x;
}

// (value, id) pairs ordered by value descending, then id ascending: the
// top-k order of SPEC.md.
__device__ __forceinline__ bool ranks_before(float v, int e, float bv, int be) {
  return v > bv || (v == bv && e < be);
}
// Float order as unsigned order: order_key(a) > order_key(b) iff a > b, for
// any floats but NaN; v + 0 turns -0 into +0, which float comparison treats
// as equal. order_key_value inverts it (-0 comes back as +0).
__device__ __forceinline__ u32 order_key(float v) {
  const u32 u = __float_as_uint(v + 0.f);
  return u ^ ((u32)((int)u >> 31) | 0x80000000u);
}
__device__ __forceinline__ float order_key_value(u32 u) {
  return __uint_as_float(u ^ ((u & 0x80000000u) ? 0x80000000u : 0xffffffffu));
}
// The top-k order as one unsigned 64-bit key: order_key above, the
// complemented id below (ids >= 0), so the best pair is the max.
__device__ __forceinline__ u64 rank_key(float v, int e) { return ((u64)order_key(v) << 32) | (u32)~e; }
__device__ __forceinline__ float rank_key_value(u64 k) { return order_key_value((u32)(k >> 32)); }
__device__ __forceinline__ int rank_key_id(u64 k) { return (int)~(u32)k; }

// Best (value, id) pair of each aligned segment of W lanes, in every lane.
template <int W> __device__ __forceinline__ u64 seg_argmax(u64 k) {
#pragma unroll
  for (int o = W / 2; o > 0; o /= 2) {
    u64 ok = __shfl_xor_sync(MOEGEN_FULL_MASK, k, o);
    k = ok > k ? ok : k;
  }
  return k;
}

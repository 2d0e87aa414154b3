// FP8 quantization helpers (SPEC.md 5b), shared by templates/quant.cu.lt and
// the fused FP8 permute (templates/permute_fp8.cu.lt); each includes this
// file, the guard keeps one copy where both are compiled together. The
// numbers (FP8_MAX, pow2) come from the includer's abi constants.
#ifndef MOEGEN_FP8_CUH
#define MOEGEN_FP8_CUH
namespace fp8 {
// The quant scale of a block (or tensor) whose largest magnitude is amax:
// fmax / amax (1 where amax = 0, FLT_MAX where the quotient overflows),
// its mantissa cleared when pow2.
__device__ __forceinline__ float quant_scale(float amax, float fmax, bool pow2) {
  float s = amax > 0.f ? fmax / amax : 1.f;
  if (s > __uint_as_float(0x7f7fffffu)) s = __uint_as_float(0x7f7fffffu);
  if (pow2) s = __uint_as_float(__float_as_uint(s) & 0xff800000u);
  return s;
}

// v rounded to the FP8 format of MBITS mantissa bits and exponent bias
// BIAS, nearest even, saturated to +-fmax (its largest finite value); NaN
// -> 0x7f. Integer arithmetic (no cvt to FP8 before sm_89), the same on
// every arch.
template <int MBITS, int BIAS>
__device__ __forceinline__ u32 to_fp8(float v, float fmax) {
  constexpr int DROP = 23 - MBITS;
  const u32 u = __float_as_uint(v), sign = (u >> 24) & 0x80u, a = u & 0x7fffffffu;
  const u32 maxf = __float_as_uint(fmax), maxc = (maxf >> DROP) - ((u32)(127 - BIAS) << MBITS);
  if (a > 0x7f800000u) return 0x7fu;
  if (a >= maxf) return sign | maxc;
  if ((int)(a >> 23) - 127 >= 1 - BIAS) { // normal in the format
    const u32 r = a + ((1u << (DROP - 1)) - 1u) + ((a >> DROP) & 1u);
    return sign | ((r >> DROP) - ((u32)(127 - BIAS) << MBITS));
  }
  // subnormal: a multiple of 2^(1 - BIAS - MBITS); the count of them, rounded
  // to nearest even (2^MBITS of them is the smallest normal, whose code it is)
  const float scaled = __uint_as_float(a) * (float)(1u << (BIAS - 1 + MBITS));
  return sign | (u32)__float2int_rn(scaled);
}
__device__ __forceinline__ u32 to_e4m3(float v, float fmax) { return to_fp8<3, 7>(v, fmax); }
__device__ __forceinline__ u32 to_e5m2(float v, float fmax) { return to_fp8<2, 15>(v, fmax); }

// Half h (0: low) of a packed pair of bf16 as fp32.
__device__ __forceinline__ float pair_half(u32 pair, int h) {
  return __uint_as_float(h ? pair & 0xffff0000u : pair << 16);
}
} // namespace fp8
#endif

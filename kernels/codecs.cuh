// Number formats of compressed feature rows, for gather_decode (gather.cu).
//
// A format is a tag type: `bits` is its storage (one code, or one output element), `decode` turns
// the bits into a float exactly, `encode` rounds a float to the format, and `kAffine` says whether
// the decoded code still goes through the per-column or per-row map x * scale + offset:
//
//   zc_f32   float32 (output)              zc_fp16  IEEE half (code or output)
//   zc_bf16  bfloat16 (code or output)     zc_int8  signed 8-bit affine code
//
// Every conversion is exact or rounds to nearest, ties to even, keeps subnormals and overflows to
// infinity: the results equal torch's CPU conversions bit for bit (NaN stays NaN; its payload bits
// are not promised). fp16 uses the GPU's conversion instructions (one each); the CPU emulator has
// software equivalents in kernels/cpu_shim.h. bf16 is a few integer operations, the same code on
// the GPU and in the emulator (the instruction for it needs sm_80, and these cost nothing next to
// a PCIe read).
//
// The affine map is zc_mul_rn then zc_add_rn: two roundings, never contracted into an FMA (which
// the compiler would otherwise do with --fmad=true), subnormals kept, so a * s + o equals torch's
// float32 `codes * scale + offset` exactly, subnormal scales, offsets and results included.
//
// Subnormals and -ftz=true: CuPy compiles every kernel with -ftz=true (dgl_zerocopy/kernel_source.py
// nvrtc_options). Under it, float arithmetic that has a flush-to-zero form gets it: __fmul_rn and
// __fadd_rn become mul.rn.ftz.f32 and add.rn.ftz.f32, which flush subnormal inputs and results to
// a zero of the same sign, so a column of values below 2^-126 (or with a scale below it) would
// decode to its offset or to zero. zc_mul_rn and zc_add_rn are the PTX instructions without .ftz,
// which keep subnormals whatever the flag says; the explicit .rn keeps them out of any FMA. The
// conversions are inline PTX without .ftz for the same reason, and bf16 is integer code. So no
// float arithmetic in these kernels may be written with C operators or CUDA's float intrinsics:
// tests/cuda/test_kernels_nvrtc.py checks that the PTX of every instantiation, compiled with CuPy's
// options, holds no .ftz instruction, and the CPU emulator flushes in __fmul_rn/__fadd_rn as the
// GPU would (cpu_shim.h), so a kernel that used them fails the subnormal decode test.
#pragma once

#include "gather_common.cuh"

#ifndef ZC_CPU_EMULATOR
// IEEE half <-> float with the conversion instructions (sm_53 and later; no cuda_fp16.h needed).
// The CPU emulator defines the same functions in software (kernels/cpu_shim.h), equal to these
// for every input but NaN payloads; its tests check the conversions against torch exhaustively.
__device__ __forceinline__ float zc_half_to_float(unsigned short h) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));  // exact
  return f;
}

__device__ __forceinline__ unsigned short zc_float_to_half(float f) {
  unsigned short h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));  // nearest, ties to even; subnormals kept
  return h;
}

// a * b and a + b in float32, rounded to nearest even, subnormal inputs and results kept under
// -ftz=true, never fused into an FMA (see the top of this file). The emulator's are plain C++.
__device__ __forceinline__ float zc_mul_rn(float a, float b) {
  float r;
  asm("mul.rn.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  return r;
}

__device__ __forceinline__ float zc_add_rn(float a, float b) {
  float r;
  asm("add.rn.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  return r;
}
#endif

// bfloat16 bits -> float (exact: bf16 is the top half of a float).
__device__ __forceinline__ float zc_bf16_to_float(unsigned short b) {
  return __uint_as_float((unsigned)b << 16);
}

// float -> bfloat16 bits, round to nearest, ties to even (overflow rounds to infinity).
__device__ __forceinline__ unsigned short zc_float_to_bf16(float f) {
  const unsigned u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) {
    return (unsigned short)0x7fc0u;  // NaN
  }
  return (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

struct zc_f32 {
  typedef unsigned bits;
  static constexpr bool kAffine = false;
  static __device__ __forceinline__ float decode(bits b) { return __uint_as_float(b); }
  static __device__ __forceinline__ bits encode(float f) { return __float_as_uint(f); }
};

struct zc_fp16 {
  typedef unsigned short bits;
  static constexpr bool kAffine = false;
  static __device__ __forceinline__ float decode(bits b) { return zc_half_to_float(b); }
  static __device__ __forceinline__ bits encode(float f) { return zc_float_to_half(f); }
};

struct zc_bf16 {
  typedef unsigned short bits;
  static constexpr bool kAffine = false;
  static __device__ __forceinline__ float decode(bits b) { return zc_bf16_to_float(b); }
  static __device__ __forceinline__ bits encode(float f) { return zc_float_to_bf16(f); }
};

// int8 codes: decode gives the integer; the kernel applies the affine map.
struct zc_int8 {
  typedef signed char bits;
  static constexpr bool kAffine = true;
  static __device__ __forceinline__ float decode(bits b) { return (float)b; }
};

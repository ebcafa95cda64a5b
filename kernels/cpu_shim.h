// CPU stand-in for the CUDA built-ins the kernels use, so that g++ compiles kernels/*.cu
// unchanged and dgl_zerocopy/emulator.py can run them: a kernel launch becomes a loop over blocks
// and, inside each block, over threads, one after another. That is faithful for kernels without
// __syncthreads(), warp shuffles or inter-thread communication, which ours avoid on purpose.
//
// With a trace active, every load made through zc_load_if() (gather_common.cuh) is recorded as
// (address, bytes, global warp index, load-site number of its thread). Lanes of one warp that
// pass the same load site the same number of times form one warp-wide instruction, the unit the
// GPU coalesces into 128-byte line requests (dgl_zerocopy/pcie_model.py).
//
// The emulator includes this header, then gather.cu, then one ZC_EMU_ENTRY per kernel
// instantiation (a C symbol for ctypes) and ZC_EMU_CONVERT_ENTRY.
#pragma once

#define ZC_CPU_EMULATOR 1

#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>
#include <vector>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline

struct uint3 {
  unsigned x, y, z;
};
struct dim3 {
  unsigned x, y, z;
};
// Same sizes and alignments as CUDA's vector types: the kernels rely on them being one load.
struct alignas(16) uint4 {
  unsigned x, y, z, w;
};
struct alignas(8) uint2 {
  unsigned x, y;
};
static_assert(sizeof(uint4) == 16 && alignof(uint4) == 16, "uint4 must be one 16-byte unit");
static_assert(sizeof(uint2) == 8 && alignof(uint2) == 8, "uint2 must be one 8-byte unit");

// Bit casts and arithmetic with one explicit rounding, as CUDA's intrinsics. The emulator
// compiles with -ffp-contract=off, so a multiply and an add are never fused into an FMA here
// either: both sides round twice.
inline float __uint_as_float(unsigned u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
inline unsigned __float_as_uint(float f) {
  unsigned u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

// Flush-to-zero, modelled where the GPU has it. CuPy compiles with -ftz=true, under which
// __fmul_rn/__fadd_rn are mul.rn.ftz.f32/add.rn.ftz.f32: subnormal inputs and results become a
// zero of the same sign. The emulator defines ZC_EMU_FTZ when the GPU's options flush
// (dgl_zerocopy/kernel_source.py gpu_flushes_subnormals), so a kernel using these intrinsics
// decodes tiny values here exactly as wrongly as on the GPU. Model assumption: the result is
// flushed when it is subnormal after rounding (a product just below 2^-126 that rounds up to it
// is kept); the kernels avoid the question by not using these (codecs.cuh).
#ifdef ZC_EMU_FTZ
inline float zc_emu_flush(float x) {
  return (__float_as_uint(x) & 0x7f800000u) == 0u ? __uint_as_float(__float_as_uint(x) & 0x80000000u) : x;
}
#else
inline float zc_emu_flush(float x) { return x; }
#endif
inline float __fmul_rn(float a, float b) { return zc_emu_flush(zc_emu_flush(a) * zc_emu_flush(b)); }
inline float __fadd_rn(float a, float b) { return zc_emu_flush(zc_emu_flush(a) + zc_emu_flush(b)); }

// The high 64 bits of a 64 x 64-bit product (the sampling kernels' RNG, sample_rng.cuh).
inline unsigned long long __umul64hi(unsigned long long a, unsigned long long b) {
  return (unsigned long long)(((unsigned __int128)a * b) >> 64);
}

// codecs.cuh's multiply and add that keep subnormals under -ftz=true (PTX mul.rn.f32/add.rn.f32).
inline float zc_mul_rn(float a, float b) { return a * b; }
inline float zc_add_rn(float a, float b) { return a + b; }

// kernels/codecs.cuh uses the GPU's fp16 conversion instructions; here they are computed in
// integer arithmetic. tests/cuda/test_emulator_decode.py compares both directions with torch for every
// half and for floats around every rounding boundary (through zc_emu_convert below).

// IEEE half bits -> float (exact), what cvt.f32.f16 computes on the GPU.
inline float zc_half_to_float(unsigned short h) {
  const unsigned sign = ((unsigned)h & 0x8000u) << 16;
  const unsigned exponent = ((unsigned)h >> 10) & 0x1fu;
  const unsigned mantissa = (unsigned)h & 0x3ffu;
  if (exponent == 0x1fu) {  // infinity, or NaN (made quiet)
    return __uint_as_float(sign | 0x7f800000u | (mantissa << 13) | (mantissa != 0u ? 0x400000u : 0u));
  }
  if (exponent != 0u) {  // normal: rebias the exponent from 15 to 127
    return __uint_as_float(sign | ((exponent + 112u) << 23) | (mantissa << 13));
  }
  // zero or subnormal: mantissa * 2^-24, exact in float (an integer below 2^10 times a power of 2)
  return __uint_as_float(sign | __float_as_uint((float)mantissa * 5.9604644775390625e-8f));
}

// float -> IEEE half bits, round to nearest, ties to even: what cvt.rn.f16.f32 computes.
inline unsigned short zc_float_to_half(float f) {
  const unsigned u = __float_as_uint(f);
  const unsigned sign = (u >> 16) & 0x8000u;
  const unsigned a = u & 0x7fffffffu;
  if (a > 0x7f800000u) {
    return (unsigned short)(sign | 0x7e00u);  // NaN
  }
  if (a >= 0x477ff000u) {
    return (unsigned short)(sign | 0x7c00u);  // infinity, or >= 65520: rounds past 65504
  }
  if (a >= 0x38800000u) {  // >= 2^-14: normal in half; rebias, then round away 13 mantissa bits
    const unsigned r = a - 0x38000000u;
    return (unsigned short)(sign | ((r + 0x0fffu + ((r >> 13) & 1u)) >> 13));
  }
  if (a < 0x33000000u) {
    return (unsigned short)sign;  // below 2^-25: rounds to zero (2^-25 itself ties to zero below)
  }
  // subnormal in half: mantissa (with its leading 1) shifted right by 14..24 bits, rounded
  const unsigned shift = 126u - (a >> 23);
  const unsigned m = (a & 0x7fffffu) | 0x800000u;
  const unsigned q = m >> shift;
  const unsigned rest = m & ((1u << shift) - 1u);
  const unsigned halfway = 1u << (shift - 1u);
  const unsigned up = (rest > halfway || (rest == halfway && (q & 1u) != 0u)) ? 1u : 0u;
  return (unsigned short)(sign | (q + up));  // a carry into the exponent gives 2^-14: right
}

// thread_local: two Python threads may run emulated kernels at once (ctypes drops the GIL).
static thread_local uint3 threadIdx;
static thread_local uint3 blockIdx;
static thread_local dim3 blockDim;
static thread_local dim3 gridDim;

// One recorded load. Layout mirrored by the NumPy dtype in dgl_zerocopy/emulator.py.
struct zc_load_record {
  long long address;
  long long warp;
  long long slot;
  int bytes;
  int reserved;
};

static thread_local std::vector<zc_load_record> zc_trace_buffer;
static thread_local bool zc_tracing = false;
static thread_local long long zc_current_warp = 0;
static thread_local long long zc_current_slot = 0;

inline void zc_trace_load(const void* ptr, int bytes, bool active) {
  if (zc_tracing && active) {
    zc_trace_buffer.push_back(
        {(long long)(std::uintptr_t)ptr, zc_current_warp, zc_current_slot, bytes, 0});
  }
  ++zc_current_slot;
}

// Calls kernel(args...) where args[i] points at the i-th argument's value, as cudaLaunchKernel
// takes them.
template <typename... P, std::size_t... I>
void zc_invoke(void (*kernel)(P...), void** args, std::index_sequence<I...>) {
  kernel(*static_cast<typename std::remove_reference<P>::type*>(args[I])...);
}

template <typename... P>
void zc_launch(void (*kernel)(P...), unsigned grid, unsigned block, void** args) {
  gridDim = dim3{grid, 1, 1};
  blockDim = dim3{block, 1, 1};
  for (unsigned b = 0; b < grid; ++b) {
    blockIdx = uint3{b, 0, 0};
    for (unsigned t = 0; t < block; ++t) {
      threadIdx = uint3{t, 0, 0};
      zc_current_warp = ((long long)b * block + t) / 32;
      zc_current_slot = 0;
      zc_invoke(kernel, args, std::index_sequence_for<P...>{});
    }
  }
}

// A C entry point for one kernel instantiation: symbol(grid, block, args).
#define ZC_EMU_ENTRY(symbol, ...)                                         \
  extern "C" void symbol(unsigned grid, unsigned block, void** args) {    \
    zc_launch(&__VA_ARGS__, grid, block, args);                          \
  }

extern "C" int zc_emu_record_bytes() { return (int)sizeof(zc_load_record); }

extern "C" void zc_emu_trace_begin() {
  zc_trace_buffer.clear();
  zc_tracing = true;
}

extern "C" long long zc_emu_trace_size() { return (long long)zc_trace_buffer.size(); }

extern "C" void zc_emu_trace_copy(void* dst) {
  if (!zc_trace_buffer.empty()) {
    std::memcpy(dst, zc_trace_buffer.data(), zc_trace_buffer.size() * sizeof(zc_load_record));
  }
}

extern "C" void zc_emu_trace_end() {
  zc_tracing = false;
  std::vector<zc_load_record>().swap(zc_trace_buffer);
}

// The float32 arithmetic over arrays, for its tests: kind 0 __fmul_rn, 1 __fadd_rn (flushing when
// ZC_EMU_FTZ is defined), 2 zc_mul_rn, 3 zc_add_rn.
extern "C" int zc_emu_flushes_subnormals() {
#ifdef ZC_EMU_FTZ
  return 1;
#else
  return 0;
#endif
}

extern "C" void zc_emu_float_op(int kind, const float* a, const float* b, float* out, long long n) {
  for (long long i = 0; i < n; ++i) {
    out[i] = kind == 0 ? __fmul_rn(a[i], b[i]) : kind == 1 ? __fadd_rn(a[i], b[i])
           : kind == 2 ? zc_mul_rn(a[i], b[i]) : zc_add_rn(a[i], b[i]);
  }
}

// The fp16 and bf16 conversions over arrays, for their tests: kind 0 half -> float, 1 float ->
// half (the two above), 2 bf16 -> float, 3 float -> bf16 (codecs.cuh's own). Expanded by the
// emulator after gather.cu, which brings codecs.cuh.
#define ZC_EMU_CONVERT_ENTRY                                                         \
  extern "C" void zc_emu_convert(int kind, const void* in, void* out, long long n) { \
    for (long long i = 0; i < n; ++i) {                                              \
      if (kind == 0) {                                                               \
        static_cast<float*>(out)[i] = zc_half_to_float(static_cast<const unsigned short*>(in)[i]); \
      } else if (kind == 1) {                                                        \
        static_cast<unsigned short*>(out)[i] = zc_float_to_half(static_cast<const float*>(in)[i]); \
      } else if (kind == 2) {                                                        \
        static_cast<float*>(out)[i] = zc_bf16_to_float(static_cast<const unsigned short*>(in)[i]); \
      } else {                                                                       \
        static_cast<unsigned short*>(out)[i] = zc_float_to_bf16(static_cast<const float*>(in)[i]); \
      }                                                                              \
    }                                                                                \
  }

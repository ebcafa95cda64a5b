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
// instantiation (a C symbol for ctypes).
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

// Helpers shared by the gather kernels (kernels/gather.cu).
//
// Every read of the feature table goes through zc_load_if(), for one reason: the CPU emulator
// (dgl_zerocopy/emulator.py, kernels/cpu_shim.h) compiles these same files with g++ and needs to
// see each load's address to model PCIe requests. On the GPU the hook is empty and the helper
// inlines to one predicated load.
//
// Only builtin types are used (long long, unsigned, uint4/uint2): NVRTC has no <cstdint>.
#pragma once

#ifdef ZC_CPU_EMULATOR
// cpu_shim.h defines zc_trace_load(address, bytes, active). It is called on every pass through a
// load site, active or masked, so that the emulator can number a thread's load sites and group
// the loads of one warp-wide instruction (same warp, same site number) as the GPU coalescer does.
#define ZC_ON_LOAD(ptr, bytes, active) zc_trace_load((const void*)(ptr), (bytes), (active))
#define ZC_UNROLL
#else
#define ZC_ON_LOAD(ptr, bytes, active) ((void)0)
#define ZC_UNROLL _Pragma("unroll")
#endif

// Where a thread stands in the aligned scheme's grid-stride loop over rows: the lanes of a warp in
// groups of threads_per_row (a power of two dividing 32), one row per group; the warps stride over
// the rows together, so all lanes of a warp iterate alike. Rows first, first + stride, ... are this
// warp's (plus group for this lane's row).
struct ZcRowGroups {
  long long first, stride, group;
  unsigned lane_in_row;

  __device__ explicit ZcRowGroups(int threads_per_row) {
    const unsigned lane = threadIdx.x & 31u;
    const long long rows_per_warp = 32 / threads_per_row;
    lane_in_row = lane & (unsigned)(threads_per_row - 1);
    group = (long long)(lane / (unsigned)threads_per_row);
    first = (((long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5) * rows_per_warp;
    stride = (((long long)gridDim.x * blockDim.x) >> 5) * rows_per_warp;
  }
};

// Reads *ptr when active, else returns a zero value without touching memory.
// Masked lanes must not read: their address may lie outside the table (before its first row
// or after its last), and over PCIe a read is never free.
template <typename T>
__device__ __forceinline__ T zc_load_if(const T* ptr, bool active) {
  ZC_ON_LOAD(ptr, (int)sizeof(T), active);
  T value = T();
  if (active) {
    value = *ptr;
  }
  return value;
}

// Writes value to *ptr when active. Output rows live in device memory; stores are not traced.
template <typename T>
__device__ __forceinline__ void zc_store_if(T* ptr, const T& value, bool active) {
  if (active) {
    *ptr = value;
  }
}

// Writes the kBytes bytes of chunk (decoded output elements, in registers) to dst with stores of
// the widest width <= store_bytes that divides kBytes. The launcher passes the widest store that
// the output's base address and row stride allow, so every store is naturally aligned.
template <int kBytes>
__device__ __forceinline__ void zc_store_chunk(char* dst, const uint4* chunk, int store_bytes) {
  if (kBytes % 16 == 0 && store_bytes >= 16) {
    ZC_UNROLL
    for (int k = 0; k < kBytes / 16; ++k) {
      reinterpret_cast<uint4*>(dst)[k] = chunk[k];
    }
  } else if (kBytes % 8 == 0 && store_bytes >= 8) {
    ZC_UNROLL
    for (int k = 0; k < kBytes / 8; ++k) {
      reinterpret_cast<uint2*>(dst)[k] = reinterpret_cast<const uint2*>(chunk)[k];
    }
  } else if (kBytes % 4 == 0 && store_bytes >= 4) {
    ZC_UNROLL
    for (int k = 0; k < kBytes / 4; ++k) {
      reinterpret_cast<unsigned*>(dst)[k] = reinterpret_cast<const unsigned*>(chunk)[k];
    }
  } else {
    ZC_UNROLL
    for (int k = 0; k < kBytes / 2; ++k) {  // output elements are 2 or 4 bytes
      reinterpret_cast<unsigned short*>(dst)[k] = reinterpret_cast<const unsigned short*>(chunk)[k];
    }
  }
}

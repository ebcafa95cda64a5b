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

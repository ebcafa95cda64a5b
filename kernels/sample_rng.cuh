// The counter-based random numbers of the sampling kernels (kernels/sample.cu).
//
// A pick is a pure function of (seed, the seed node's position i in seeds, draw index d, range n):
// no state is kept between draws, threads or launches, so any thread layout, the CPU emulator and
// the NumPy reference (dgl_zerocopy/cuda/sampling/rng.py, the same formulas) draw the same picks.
//
//   zc_mix64(z)         SplitMix64's finaliser
//   zc_row_key(seed, i) = zc_mix64(zc_mix64(seed + G) + (i + 1) * G)      G = 0x9E3779B97F4A7C15
//   zc_draw(key, d)     = zc_mix64(key + (d + 1) * G)                     SplitMix64's stream at key
//   zc_uniform(r, n)    = high 64 bits of r * n: in [0, n), bias < n / 2^64
//
// All arithmetic is unsigned 64-bit, wrapping; no curand (NVRTC and g++ both compile this).
#pragma once

#define ZC_GOLDEN 0x9E3779B97F4A7C15ull

__device__ __forceinline__ unsigned long long zc_mix64(unsigned long long z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

__device__ __forceinline__ unsigned long long zc_row_key(unsigned long long seed, long long row) {
  return zc_mix64(zc_mix64(seed + ZC_GOLDEN) + ((unsigned long long)row + 1ull) * ZC_GOLDEN);
}

__device__ __forceinline__ unsigned long long zc_draw(unsigned long long key, long long d) {
  return zc_mix64(key + ((unsigned long long)d + 1ull) * ZC_GOLDEN);
}

// An integer in [0, n) for n >= 1 (multiply-shift; __umul64hi is one instruction pair on the GPU).
__device__ __forceinline__ long long zc_uniform(unsigned long long r, long long n) {
  return (long long)__umul64hi(r, (unsigned long long)n);
}

// Temporal and weighted neighbour picks on the GPU from an in-edge CSC whose per-position times or weights
// live in pinned host memory (read zero-copy over PCIe) or in device memory: dgl_zerocopy/cuda/sampling/
// temporal.py launches them, the CPU emulator runs them, its NumPy twins are the references.
//
// They work on sample.cu's bounds (bounds[2i], bounds[2i + 1]: seed i's in-edges, from sample_bounds):
//   sample_cut_by_time<TimeT>: thread per seed: the in-edges no later than seed_time[i], found by binary
//     search (times are sorted within each neighbourhood), and for 'last' (last != 0, fanout >= 0) the
//     latest fanout of them; the bounds are shrunk in place, so that sample.cu's count, pick and fetch
//     passes pick inside the cut unchanged.                     [reads times: one load per search step]
//   sample_count_weighted: thread per seed: its number of weighted picks into out_indptr[i + 1] (with
//     replacement: none where the neighbourhood weighs 0 in total).             [reads sums: one load]
//   sample_pick_weighted: thread per seed: its picks into pos[out_indptr[i]..], sorted by position.
//     With replacement, draw d is u = the 53 high bits of zc_draw(zc_row_key(seed, i), d) over 2^53, and
//     picks the first position whose running sum (sums) passes u * total: a binary search. Without
//     replacement, the in-edge at offset e gets the key log(u_e + 2^-54) / w_e (u_e from draw e; the
//     lowest double for a weight of 0) and the fanout largest keys win, ties to the earlier position
//     (Efraimidis and Spirakis); fanout <= ZC_WEIGHTED_MAX_FANOUT, kept in a thread's registers.
//     deg <= fanout without replacement, or fanout == -1: every position.  [reads sums or weights]
//   sample_fetch_positions<IdT>: thread per pick: src[e] = indices[pos[e]].      [reads indices]
//
// Threads do not communicate (the emulator runs them one after another); every CSC-side read goes
// through zc_load_if, so the emulator's trace feeds the PCIe model.

#include "gather_common.cuh"
#include "sample_rng.cuh"

#ifdef ZC_CPU_EMULATOR
#include <cmath>
#define ZC_LOG std::log
#else
#define ZC_LOG log
#endif

#define ZC_WEIGHTED_MAX_FANOUT 64
#define ZC_LOWEST_DOUBLE (-1.7976931348623157e308)

template <typename TimeT>
__global__ void sample_cut_by_time(const TimeT* __restrict__ times, const TimeT* __restrict__ seed_time,
                                   long long num_seeds, int fanout, int last, long long* __restrict__ bounds) {
  const long long stride = (long long)gridDim.x * blockDim.x;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < num_seeds; i += stride) {
    const long long start = bounds[2 * i];
    const TimeT t = seed_time[i];
    long long lo = start;
    long long hi = bounds[2 * i + 1];
    while (lo < hi) {  // upper bound: the first position later than t
      const long long mid = (lo + hi) >> 1;
      if (zc_load_if(times + mid, true) <= t) {
        lo = mid + 1;
      } else {
        hi = mid;
      }
    }
    long long first = start;
    if (last != 0 && fanout >= 0 && lo - (long long)fanout > start) {
      first = lo - (long long)fanout;
    }
    bounds[2 * i] = first;
    bounds[2 * i + 1] = lo;
  }
}

__device__ __forceinline__ long long zc_weighted_count(long long deg, double total, int fanout, int replace) {
  if (fanout < 0) {
    return deg;
  }
  if (replace != 0) {
    return total > 0.0 ? (long long)fanout : 0;
  }
  return deg < (long long)fanout ? deg : (long long)fanout;
}

__device__ __forceinline__ double zc_unit(unsigned long long r) {
  return (double)(r >> 11) * (1.0 / 9007199254740992.0);  // 2^-53
}

__global__ void sample_count_weighted(const long long* __restrict__ bounds, const double* __restrict__ sums,
                                      long long num_seeds, int fanout, int replace, long long* __restrict__ out_indptr) {
  const long long stride = (long long)gridDim.x * blockDim.x;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < num_seeds; i += stride) {
    const long long lo = bounds[2 * i];
    const long long deg = bounds[2 * i + 1] - lo;
    const double total = zc_load_if(sums + (deg > 0 ? lo + deg - 1 : 0), deg > 0 && replace != 0 && fanout >= 0);
    out_indptr[i + 1] = zc_weighted_count(deg, total, fanout, replace);
    if (i == 0) {
      out_indptr[0] = 0;
    }
  }
}

__global__ void sample_pick_weighted(const long long* __restrict__ bounds, const double* __restrict__ weights,
                                     const double* __restrict__ sums, const long long* __restrict__ out_indptr,
                                     long long num_seeds, int fanout, int replace, unsigned long long seed,
                                     long long* __restrict__ pos) {
  const long long stride = (long long)gridDim.x * blockDim.x;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < num_seeds; i += stride) {
    const long long lo = bounds[2 * i];
    const long long end = bounds[2 * i + 1];
    const long long deg = end - lo;
    long long* p = pos + out_indptr[i];
    const long long count = out_indptr[i + 1] - out_indptr[i];
    const unsigned long long key = zc_row_key(seed, i);
    if (fanout < 0 || (replace == 0 && deg <= (long long)fanout)) {
      for (long long e = 0; e < count; ++e) {
        p[e] = lo + e;
      }
    } else if (replace != 0) {
      const double total = count > 0 ? zc_load_if(sums + end - 1, true) : 0.0;
      for (long long d = 0; d < count; ++d) {
        const double target = zc_unit(zc_draw(key, d)) * total;
        long long a = lo;
        long long b = end;
        while (a < b) {  // the first position whose running sum passes the target
          const long long mid = (a + b) >> 1;
          if (zc_load_if(sums + mid, true) <= target) {
            a = mid + 1;
          } else {
            b = mid;
          }
        }
        const long long t = a < end ? a : end - 1;
        long long at = d;  // sorted insertion: the picks of a seed in position order
        while (at > 0 && p[at - 1] > t) {
          p[at] = p[at - 1];
          --at;
        }
        p[at] = t;
      }
    } else {
      // The fanout largest keys so far, best[0] the smallest of them (a sorted array, fanout <= 64).
      double best[ZC_WEIGHTED_MAX_FANOUT];
      long long where[ZC_WEIGHTED_MAX_FANOUT];
      const int k = fanout;
      for (int j = 0; j < k; ++j) {
        best[j] = ZC_LOWEST_DOUBLE;
        where[j] = -1;  // empty: below every key
      }
      for (long long e = 0; e < deg; ++e) {
        const double w = zc_load_if(weights + lo + e, true);
        const double u = zc_unit(zc_draw(key, e)) + 0.5 / 9007199254740992.0;
        const double value = w > 0.0 ? ZC_LOG(u) / w : ZC_LOWEST_DOUBLE;
        if (where[0] >= 0 && !(value > best[0])) {
          continue;  // not larger than the smallest kept: ties keep the earlier position
        }
        int at = 0;  // drop best[0], insert value in order
        while (at + 1 < k && (where[at + 1] < 0 || best[at + 1] < value)) {
          best[at] = best[at + 1];
          where[at] = where[at + 1];
          ++at;
        }
        best[at] = value;
        where[at] = lo + e;
      }
      for (int j = 0; j < k; ++j) {  // the winners in position order
        long long t = where[j];
        int at = j;
        while (at > 0 && p[at - 1] > t) {
          p[at] = p[at - 1];
          --at;
        }
        p[at] = t;
      }
    }
  }
}

template <typename IdT>
__global__ void sample_fetch_positions(const IdT* __restrict__ indices, const long long* __restrict__ pos,
                                       long long total, long long* __restrict__ src) {
  const long long stride = (long long)gridDim.x * blockDim.x;
  for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += stride) {
    src[e] = (long long)zc_load_if(indices + pos[e], true);
  }
}

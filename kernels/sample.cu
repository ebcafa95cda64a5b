// Uniform neighbour sampling of one layer from an in-edge CSC that may live in pinned host memory
// (read zero-copy over PCIe) or in device memory: dgl_zerocopy/cuda/sampling (sample_csc).
//
// For seed i (node v = seeds[i], in-edges at CSC positions [lo, lo + deg)):
//   fanout == -1, or deg <= fanout without replacement:  every position, in order ("takes all");
//   without replacement, deg > fanout:  Floyd's algorithm, a uniform fanout-subset of [0, deg);
//   with replacement, deg > 0:          fanout independent uniform positions;
// each seed's picks sorted by position, the random numbers those of sample_rng.cuh, keyed by
// (seed, i, draw index): the same as the NumPy reference, exactly.
//
// Four passes, launched by the host in order on one stream (the plan: dgl_zerocopy/cuda/sampling/
// launch.py); only the marked loads read the CSC, i.e. cross PCIe when it is pinned host memory:
//   1. sample_bounds: thread per (seed, end): bounds[2i + b] = indptr[v + b]          [reads indptr]
//      Lanes 2i and 2i+1 of a warp read the two adjacent offsets of a seed in one instruction:
//      one request per seed (two when the pair straddles a 128-byte line), not two.
//   2. sample_count: thread per seed: out_indptr[i + 1] = its number of picks (out_indptr[0] = 0).
//      The host scans out_indptr in place (torch, on the device). The total out_indptr[S]
//      stays on the device: the outputs are allocated for a capacity >= the total that the host
//      knows without asking (S x fanout, or a total it read earlier), and passes 3 and 4 read the
//      total where it lies. sample_csc reads it back to size its outputs exactly: its one sync.
//   3. sample_pick: thread per sampling seed: its sorted picked positions into pos[out_indptr[i]..].
//      Device memory only: the picks are chosen from deg alone, so a hub of degree 10^6 costs
//      fanout draws, never a pass over its neighbours.
//   4. sample_fetch: thread per output slot: src[e] = indices[pos[e]] for e < total   [reads indices]
//      and src[e] = pos[e] = -1 for the unused slots up to the capacity. Consecutive lanes take
//      consecutive picks of a seed, sorted: the picks of one seed that share a 128-byte line cost
//      one request. (sample_fetch_per_seed, a thread per seed, is the comparison point of the
//      PCIe model, as gather_naive is for the gather.)
//
// Seeds outside [0, num_nodes) are not read: their bounds are [0, 0) (no picks), and the
// position of one of them goes to *bad, which the host reads together with the total. Seeds at
// positions >= *limit (a count on the device: the valid prefix of a buffer sized for more) are
// skipped alike, without flagging. A total above the capacity (a caller's error) makes passes 3
// and 4 write nothing but the -1 slots: no write lands outside the outputs.
//
// No __syncthreads or shuffles, and atomics only in the relabelling (below, each modelled for the
// emulator): the CPU emulator runs threads one after another. Loops
// over traced loads are per warp (all lanes iterate together) so that the emulator can group a
// warp's loads into instructions, as for the gather kernels.

#include "gather_common.cuh"
#include "sample_rng.cuh"

__device__ __forceinline__ bool zc_takes_all(long long deg, int fanout, int replace) {
  return fanout < 0 || (replace == 0 && deg <= (long long)fanout);
}

__device__ __forceinline__ long long zc_pick_count(long long deg, int fanout, int replace) {
  if (fanout < 0) {
    return deg;
  }
  if (replace != 0) {
    return deg > 0 ? (long long)fanout : 0;
  }
  return deg < (long long)fanout ? deg : (long long)fanout;
}

// Pass 1. bounds holds 2 * num_seeds int64 (device memory); *bad starts at -1. limit: null (every
// seed) or a device int64 holding how many leading seeds are live.
template <typename PtrT, typename SeedT>
__global__ void sample_bounds(const PtrT* __restrict__ indptr, long long num_nodes,
                              const SeedT* __restrict__ seeds, long long num_seeds,
                              const long long* __restrict__ limit, long long* __restrict__ bounds,
                              long long* __restrict__ bad) {
  const long long lane = (long long)(threadIdx.x & 31u);
  const long long first = (long long)blockIdx.x * blockDim.x + threadIdx.x - lane;
  const long long stride = (long long)gridDim.x * blockDim.x;
  const long long entries = 2 * num_seeds;
  const long long live = limit != nullptr && *limit < num_seeds ? *limit : num_seeds;
  for (long long base = first; base < entries; base += stride) {
    const long long t = base + lane;
    const bool active = t < entries;
    const long long tt = active ? t : base;  // masked lanes still walk the load site
    const bool used = (tt >> 1) < live;      // past the limit: not a seed, never read
    const long long v = used ? (long long)seeds[tt >> 1] : 0;
    const bool valid = used && v >= 0 && v < num_nodes;
    if (active && used && !valid) {
      *bad = tt >> 1;  // any bad position will do: every writer writes one
    }
    const PtrT value = zc_load_if(indptr + (valid ? v : 0) + (tt & 1), active && valid);
    if (active) {
      bounds[t] = valid ? (long long)value : 0;
    }
  }
}

// Pass 2. out_indptr: num_seeds + 1 int64, written [0, counts...]: the scan (in place) makes them offsets.
__global__ void sample_count(const long long* __restrict__ bounds, long long num_seeds, int fanout,
                             int replace, long long* __restrict__ out_indptr) {
  const long long stride = (long long)gridDim.x * blockDim.x;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < num_seeds; i += stride) {
    out_indptr[i + 1] = zc_pick_count(bounds[2 * i + 1] - bounds[2 * i], fanout, replace);
    if (i == 0) {
      out_indptr[0] = 0;
    }
  }
}

// The first index in the sorted p[0, n) whose value is >= t (lower) or > t (upper).
__device__ __forceinline__ long long zc_search(const long long* p, long long n, long long t, bool upper) {
  long long low = 0;
  long long high = n;
  while (low < high) {
    const long long mid = (low + high) >> 1;
    if (p[mid] < t || (upper && p[mid] == t)) {
      low = mid + 1;
    } else {
      high = mid;
    }
  }
  return low;
}

// p[at] = t, p[at .. n) moved up by one.
__device__ __forceinline__ void zc_insert(long long* p, long long n, long long at, long long t) {
  for (long long k = n; k > at; --k) {
    p[k] = p[k - 1];
  }
  p[at] = t;
}

// Pass 3. Each sampling seed's picks are built sorted in place in pos[out_indptr[i] ..]:
// without replacement (Floyd), draw d chooses t in [0, j], j = deg - fanout + d, and keeps t, or j
// when t is already kept; j exceeds every earlier pick (they are <= j - 1), so it goes last. A
// binary search tests membership and places t. With replacement, each draw is inserted after its
// equals. O(fanout log fanout) comparisons and at most fanout^2 / 2 moves in device memory.
__global__ void sample_pick(const long long* __restrict__ bounds, const long long* __restrict__ out_indptr,
                            long long num_seeds, long long capacity, int fanout, int replace,
                            unsigned long long seed, long long* __restrict__ pos) {
  const long long stride = (long long)gridDim.x * blockDim.x;
  if (out_indptr[num_seeds] > capacity) {
    return;  // outputs too small for the total: write nothing (the fetch writes -1 everywhere)
  }
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < num_seeds; i += stride) {
    const long long lo = bounds[2 * i];
    const long long deg = bounds[2 * i + 1] - lo;
    if (deg == 0 || zc_takes_all(deg, fanout, replace)) {
      continue;  // no picks, or every position: sample_fetch writes those
    }
    long long* p = pos + out_indptr[i];
    const unsigned long long key = zc_row_key(seed, i);
    for (long long d = 0; d < (long long)fanout; ++d) {
      if (replace != 0) {
        const long long t = lo + zc_uniform(zc_draw(key, d), deg);
        zc_insert(p, d, zc_search(p, d, t, true), t);
      } else {
        const long long j = deg - (long long)fanout + d;
        const long long t = lo + zc_uniform(zc_draw(key, d), j + 1);
        const long long at = zc_search(p, d, t, false);
        if (at < d && p[at] == t) {
          p[d] = lo + j;
        } else {
          zc_insert(p, d, at, t);
        }
      }
    }
  }
}

// The seed owning output edge e: the largest i < num_seeds with out_indptr[i] <= e (seeds without
// picks share their offset with the next one, which the largest skips).
__device__ __forceinline__ long long zc_owner(const long long* __restrict__ out_indptr, long long num_seeds, long long e) {
  long long low = 0;
  long long high = num_seeds - 1;
  while (low < high) {
    const long long mid = (low + high + 1) >> 1;
    if (out_indptr[mid] <= e) {
      low = mid;
    } else {
      high = mid - 1;
    }
  }
  return low;
}

// Pass 4. Thread per output slot, grid-stride per warp over the capacity; the total is read from
// device memory. Seeds that take all their in-edges get their positions here (pos[e] = lo + rank),
// the others' were written by sample_pick. Slots from the total to the capacity get -1.
// edge_ids (null, or the edge id of each CSC position, edge_id_bytes wide, in device memory): when
// given, pos[e] becomes the pick's edge id instead of its position (read now, for a CSC that is
// rewritten after the batch: the GPU snapshot's).
template <typename IdT>
__global__ void sample_fetch(const IdT* __restrict__ indices, const long long* __restrict__ bounds,
                             const long long* __restrict__ out_indptr, long long num_seeds, long long capacity,
                             int fanout, int replace, const void* __restrict__ edge_ids, int edge_id_bytes,
                             long long* __restrict__ pos, IdT* __restrict__ src) {
  const long long lane = (long long)(threadIdx.x & 31u);
  const long long first = (long long)blockIdx.x * blockDim.x + threadIdx.x - lane;
  const long long stride = (long long)gridDim.x * blockDim.x;
  const long long stored = out_indptr[num_seeds];
  const long long total = stored <= capacity ? stored : 0;  // too small: no picks, all -1
  for (long long base = first; base < capacity; base += stride) {
    const long long e = base + lane;
    const bool active = e < total;
    long long p = 0;  // masked lanes walk the load site at indices[0], reading nothing
    bool all = false;
    if (active) {
      const long long i = zc_owner(out_indptr, num_seeds, e);
      const long long lo = bounds[2 * i];
      all = zc_takes_all(bounds[2 * i + 1] - lo, fanout, replace);
      p = all ? lo + (e - out_indptr[i]) : pos[e];
    }
    const IdT value = zc_load_if(indices + p, active);
    if (active) {
      if (edge_ids != nullptr) {
        pos[e] = edge_id_bytes == 4 ? (long long)((const int*)edge_ids)[p] : ((const long long*)edge_ids)[p];
      } else if (all) {
        pos[e] = p;
      }
      src[e] = value;
    } else if (e < capacity) {
      pos[e] = -1;
      src[e] = (IdT)-1;
    }
  }
}

// Pass 4 as a thread per seed would do it (the PCIe model's comparison point, not launched by
// sample_csc): lane i reads seed i's picks one per step, so a warp instruction touches 32 seeds'
// lists and each pick costs a request of its own. steps: the largest count of any seed.
template <typename IdT>
__global__ void sample_fetch_per_seed(const IdT* __restrict__ indices, const long long* __restrict__ bounds,
                                      const long long* __restrict__ out_indptr, long long num_seeds,
                                      long long steps, int fanout, int replace, long long* __restrict__ pos,
                                      IdT* __restrict__ src) {
  const long long lane = (long long)(threadIdx.x & 31u);
  const long long first = (long long)blockIdx.x * blockDim.x + threadIdx.x - lane;
  const long long stride = (long long)gridDim.x * blockDim.x;
  for (long long base = first; base < num_seeds; base += stride) {
    const long long i = base + lane;
    const bool seed_active = i < num_seeds;
    const long long ii = seed_active ? i : base;
    const long long o = out_indptr[ii];
    const long long count = out_indptr[ii + 1] - o;
    const long long lo = bounds[2 * ii];
    const bool all = zc_takes_all(bounds[2 * ii + 1] - lo, fanout, replace);
    for (long long d = 0; d < steps; ++d) {
      const bool active = seed_active && d < count;
      const long long p = active ? (all ? lo + d : pos[o + d]) : lo;
      const IdT value = zc_load_if(indices + p, active);
      if (active) {
        if (all) {
          pos[o + d] = p;
        }
        src[o + d] = value;
      }
    }
  }
}

// ---- Relabelling of one sampled layer (dgl_zerocopy/sampling/relabel.py, relabel_layer) --------
//
// DGL's to_block numbering over the sampler's buffers, with no size read: the block's source nodes
// are its destinations first (dst[0, n_d), n_d = *dst_count or every entry), then each node of the
// picks src[0, S) (-1: an unused slot) that is not a destination, in the order of its first
// appearance. Entry p of the candidate list is dst[p] (p < D, the dst buffer's length) or
// src[p - D]; a node's first appearance is its smallest p, kept in an open-addressing hash table
// (2T int64: keys, then LLONG_MAX - first position; all -1 when empty, one fill). Three kernels:
//   relabel_insert: thread per candidate: claim the node's slot (compare-and-swap), lower its first
//                   position (an atomic max of LLONG_MAX - p).
//   relabel_mark:   thread per pick: new[e] = 1 when the pick is its node's first appearance and no
//                   destination has it. The host scans new into rank (torch.cumsum, on the device).
//   relabel_write:  thread per entry: nodes (dst, then new node e at n_d + rank[e] - 1), local (each
//                   pick as an index into nodes; -1 for unused slots), the block's indptr in the
//                   node dtype (when asked), and sizes[0] = the picks' total, sizes[1] = the count.
// The table holds at least twice the candidates: probes stay short, and a free slot always exists.
// The emulator runs threads one after another, so its atomics are plain reads and writes; the
// result does not depend on the order threads run in (a slot's owner and minimum are unique).

#ifdef ZC_CPU_EMULATOR
__device__ __forceinline__ unsigned long long zc_atomic_cas(unsigned long long* at, unsigned long long expected, unsigned long long value) {
  const unsigned long long old = *at;
  if (old == expected) {
    *at = value;
  }
  return old;
}
__device__ __forceinline__ void zc_atomic_max(long long* at, long long value) {
  if (value > *at) {
    *at = value;
  }
}
#else
__device__ __forceinline__ unsigned long long zc_atomic_cas(unsigned long long* at, unsigned long long expected, unsigned long long value) {
  return atomicCAS(at, expected, value);
}
__device__ __forceinline__ void zc_atomic_max(long long* at, long long value) { atomicMax(at, value); }
#endif

#define ZC_EMPTY_KEY 0xFFFFFFFFFFFFFFFFull
#define ZC_FIRST_MAX 0x7FFFFFFFFFFFFFFFll

__device__ __forceinline__ unsigned long long zc_hash(unsigned long long x) {
  x ^= x >> 33;  // the murmur3 finalizer: neighbouring ids spread over the table
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  return x;
}

// The slot of node id (>= 0) in the table of `mask + 1` slots, claimed when absent (insert), or -1.
__device__ __forceinline__ long long zc_slot(unsigned long long* keys, long long mask, long long id, bool insert) {
  const unsigned long long key = (unsigned long long)id;
  for (long long h = (long long)(zc_hash(key) & (unsigned long long)mask);; h = (h + 1) & mask) {
    unsigned long long found = keys[h];
    if (found == ZC_EMPTY_KEY && insert) {
      found = zc_atomic_cas(keys + h, ZC_EMPTY_KEY, key);
      if (found == ZC_EMPTY_KEY) {
        return h;
      }
    }
    if (found == key) {
      return h;
    }
    if (found == ZC_EMPTY_KEY) {
      return -1;
    }
  }
}

__device__ __forceinline__ long long zc_live(const long long* count, long long length) {
  return count != nullptr && *count < length ? *count : length;
}

template <typename NodeT, typename IdT>
__global__ void relabel_insert(const NodeT* __restrict__ dst, long long num_dst, const long long* __restrict__ dst_count,
                               const IdT* __restrict__ src, long long num_src, long long* __restrict__ table, long long mask) {
  const long long stride = (long long)gridDim.x * blockDim.x;
  const long long live = zc_live(dst_count, num_dst);
  unsigned long long* keys = (unsigned long long*)table;
  long long* first = table + mask + 1;
  for (long long p = (long long)blockIdx.x * blockDim.x + threadIdx.x; p < num_dst + num_src; p += stride) {
    const long long id = p < num_dst ? (p < live ? (long long)dst[p] : -1) : (long long)src[p - num_dst];
    if (id >= 0) {
      zc_atomic_max(first + zc_slot(keys, mask, id, true), ZC_FIRST_MAX - p);
    }
  }
}

template <typename IdT>
__global__ void relabel_mark(const IdT* __restrict__ src, long long num_src, long long num_dst, long long* __restrict__ table,
                             long long mask, long long* __restrict__ is_new) {
  const long long stride = (long long)gridDim.x * blockDim.x;
  unsigned long long* keys = (unsigned long long*)table;
  const long long* first = table + mask + 1;
  for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < num_src; e += stride) {
    const long long id = (long long)src[e];
    is_new[e] = id >= 0 && ZC_FIRST_MAX - first[zc_slot(keys, mask, id, false)] == num_dst + e ? 1 : 0;
  }
}

// out_indptr/block_indptr: the layer's offsets (num_seeds + 1) and their copy in the node dtype
// (block_indptr null: not asked, the node dtype is int64). sizes: two int64, [total picks, count].
template <typename NodeT, typename IdT>
__global__ void relabel_write(const NodeT* __restrict__ dst, long long num_dst, const long long* __restrict__ dst_count,
                              const IdT* __restrict__ src, long long num_src, long long* __restrict__ table, long long mask,
                              const long long* __restrict__ rank, const long long* __restrict__ out_indptr, long long num_seeds,
                              NodeT* __restrict__ block_indptr, NodeT* __restrict__ nodes, NodeT* __restrict__ local,
                              long long* __restrict__ sizes) {
  const long long stride = (long long)gridDim.x * blockDim.x;
  const long long live = zc_live(dst_count, num_dst);
  unsigned long long* keys = (unsigned long long*)table;
  const long long* first = table + mask + 1;
  long long work = num_dst > num_src ? num_dst : num_src;
  work = work > num_seeds + 1 ? work : num_seeds + 1;
  for (long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x; t < work; t += stride) {
    if (t < live) {
      nodes[t] = dst[t];
    }
    if (t < num_src) {
      const long long id = (long long)src[t];
      NodeT label = (NodeT)-1;
      if (id >= 0) {
        const long long at = ZC_FIRST_MAX - first[zc_slot(keys, mask, id, false)];
        label = (NodeT)(at < num_dst ? at : live + rank[at - num_dst] - 1);
        if (at == num_dst + t) {
          nodes[label] = (NodeT)id;
        }
      }
      local[t] = label;
    }
    if (block_indptr != nullptr && t <= num_seeds) {
      block_indptr[t] = (NodeT)out_indptr[t];
    }
    if (t == 0) {
      sizes[0] = out_indptr[num_seeds];
      sizes[1] = live + (num_src > 0 ? rank[num_src - 1] : 0);
    }
  }
}

// Row gather from a feature table that may live in pinned host memory (zero-copy over PCIe):
//
//   out[dst(j)] = table[ids[j]]    for j in [0, num_ids),  dst(j) = perm ? perm[j] : j
//
// The aligned kernels optionally read hot rows from a cache in device memory instead
// (zc_row_source below): same output, fewer PCIe reads.
//
// Rows are copied as raw bytes, so one instantiation serves every element type of the same width
// (fp32 and int32, fp16/bf16 and int16, ...). The launch configuration (vector width, threads per
// row, window alignment, steps, grid, block) is chosen in one place, dgl_zerocopy/launch.py, and
// passed in; these kernels only execute it. Ids are NOT bounds-checked here: the Python side
// checks them before the launch.
//
// Why alignment matters over PCIe: the GPU turns one warp-wide load instruction into one memory
// request per 128-byte line it touches, and a zero-copy request becomes a PCIe read whose
// completion carries a ~24-byte header. A warp that reads 128 bytes starting 16 bytes into a line
// issues two requests for one line's worth of data. The aligned kernel makes every request cover
// as much of one line as the row allows. Why vectors: a 16-byte load per lane lets one warp
// instruction cover 512 bytes (4 lines) instead of 128, so a row needs fewer instructions and more
// bytes are in flight per warp, which is what hides PCIe latency (~1-2 us).
//
// No __syncthreads() or warp shuffles: the CPU emulator runs threads one after another.

#include "gather_common.cuh"
#include "codecs.cuh"

// Steps of one row issued back to back before their stores: independent loads in flight.
#define ZC_STEPS_IN_FLIGHT 4

// The loads of steps s0 .. s0 + ZC_STEPS_IN_FLIGHT - 1 of one row, issued before any of their
// stores so that up to ZC_STEPS_IN_FLIGHT PCIe reads per lane are in flight. A lane's vector is
// active only inside the row [src, end) and for steps the row has; masked lanes load nothing.
template <typename VecT>
__device__ __forceinline__ void zc_load_steps(unsigned long long start, long long s0, long long window,
                                              long long steps_per_row, unsigned long long src,
                                              unsigned long long end, bool row_active,
                                              VecT (&value)[ZC_STEPS_IN_FLIGHT],
                                              unsigned long long (&addr)[ZC_STEPS_IN_FLIGHT],
                                              bool (&active)[ZC_STEPS_IN_FLIGHT]) {
  ZC_UNROLL
  for (int u = 0; u < ZC_STEPS_IN_FLIGHT; ++u) {
    addr[u] = start + (unsigned long long)((s0 + u) * window);
    active[u] = row_active && (s0 + u) < steps_per_row && addr[u] >= src && addr[u] < end;
    value[u] = zc_load_if(reinterpret_cast<const VecT*>(addr[u]), active[u]);
  }
}

// Hot-row cache, optional in both aligned kernels (gather_aligned, gather_decode); a null
// slot_map means no cache, the plain gather:
//
//   slot = slot_map[id]                 int32 or int64 (slot_bytes 4 or 8), -1 for "not cached"
//   src  = slot >= 0 ? cache_rows + slot * cache_stride      device memory (a hit)
//                    : table + id * row_stride                pinned host memory, over PCIe (a miss)
//
// Why optional arguments of the existing kernels rather than new kernels: a hit and a miss differ
// only in the address the row is read from. The copy after it (windows, alignment, masking, and
// for codes the decode) is the same code, so a decoded hit equals a decoded miss bit for bit by
// construction, and the number of instantiations, each compiled for every architecture in CI,
// does not double. The uncached gather pays one uniform branch per row. The slot width is a
// runtime argument for the same reason as gather_decode's id_bytes.
//
// The launcher (dgl_zerocopy/launch.py) picks a VecT that also divides the cache's base address
// and row stride, so the windows are aligned and every vector lies inside or outside a row for
// either source. Hits read through zc_load_if like misses: the emulator's trace sees both, and
// the PCIe model counts only the loads inside host memory. The slot map is device memory, read
// with one plain load per row (no PCIe traffic, nothing to trace). The caller guarantees that
// slots are -1 or in [0, cached rows).
__device__ __forceinline__ unsigned long long zc_row_source(const char* table, long long row_stride, long long id,
                                                            const void* slot_map, int slot_bytes,
                                                            const char* cache_rows, long long cache_stride,
                                                            long long& slot) {
  slot = -1;
  if (slot_map != 0) {
    slot = slot_bytes == 4 ? (long long)static_cast<const int*>(slot_map)[id]
                           : static_cast<const long long*>(slot_map)[id];
  }
  return slot >= 0 ? (unsigned long long)(cache_rows + slot * cache_stride)
                   : (unsigned long long)(table + id * row_stride);
}

// Aligned, vectorised gather: a group of threads_per_row lanes (a power of two dividing 32, so a
// group never straddles a warp) copies one row with loads of sizeof(VecT) bytes.
//
//   window = threads_per_row * sizeof(VecT): the bytes one group covers in one load instruction.
//   align_bytes: the group's first window starts at the row's start address rounded down to it:
//     - 128 when the row needs several windows of >= 128 B: windows then tile whole 128-byte
//       lines, so each line the row touches is requested exactly once (the minimum);
//     - window when the row needs several windows of < 128 B (1- or 2-byte vectors): no window
//       straddles a line, so no request is split in two;
//     - sizeof(VecT) (no shift) when the row fits in one window: the single instruction already
//       requests each line the row touches once, and shifting could only add a step.
//   steps_per_row: windows per row in the worst case (a row starting align_bytes - sizeof(VecT)
//     past an aligned address); the same for every row, so all lanes of a warp run the same
//     number of load instructions (no divergence, and the emulator can group them).
// Lanes whose vector lies outside the row are masked. VecT alignment: the launcher picks the
// widest vector dividing the table and output base addresses, both row strides and row_bytes,
// so every vector lies entirely inside or entirely outside a row.
//
// slot_map, slot_bytes, cache_rows, cache_stride: the optional hot-row cache (zc_row_source
// above); null slot_map: every row comes from the table.
//
// Grid-stride over rows: the launcher may cap the grid (to leave SMs to training) and the kernel
// still covers every row. The loop is per warp so that all its lanes iterate together.
template <typename VecT, typename IdT>
__global__ void gather_aligned(const char* __restrict__ table, long long row_stride,
                               long long row_bytes, const IdT* __restrict__ ids,
                               const long long* __restrict__ perm, long long num_ids,
                               char* __restrict__ out, long long out_stride,
                               const void* __restrict__ slot_map, int slot_bytes,
                               const char* __restrict__ cache_rows, long long cache_stride,
                               int threads_per_row, long long align_bytes, long long steps_per_row) {
  const long long vec = (long long)sizeof(VecT);
  const long long window = (long long)threads_per_row * vec;
  const ZcRowGroups rows(threads_per_row);
  const unsigned long long align_mask = ~(unsigned long long)(align_bytes - 1);

  for (long long first = rows.first; first < num_ids; first += rows.stride) {
    const long long j = first + rows.group;
    const bool row_active = j < num_ids;
    // A group past the last row still walks the loop (masked) with a valid row's addresses.
    const long long jj = row_active ? j : first;
    long long slot;
    const unsigned long long src =
        zc_row_source(table, row_stride, (long long)ids[jj], slot_map, slot_bytes, cache_rows, cache_stride, slot);
    const unsigned long long end = src + (unsigned long long)row_bytes;
    const unsigned long long start = (src & align_mask) + (unsigned long long)rows.lane_in_row * vec;
    char* dst_row = out + (perm != 0 ? perm[jj] : jj) * out_stride;

    for (long long s0 = 0; s0 < steps_per_row; s0 += ZC_STEPS_IN_FLIGHT) {
      VecT value[ZC_STEPS_IN_FLIGHT];
      unsigned long long addr[ZC_STEPS_IN_FLIGHT];
      bool active[ZC_STEPS_IN_FLIGHT];
      zc_load_steps(start, s0, window, steps_per_row, src, end, row_active, value, addr, active);
      ZC_UNROLL
      for (int u = 0; u < ZC_STEPS_IN_FLIGHT; ++u) {
        // Same byte offset in the output row as in the source row.
        zc_store_if(reinterpret_cast<VecT*>(dst_row + (addr[u] - src)), value[u], active[u]);
      }
    }
  }
}

// Naive gather, the comparison point: one thread per element of the flattened output, loads of
// one element (sizeof(ElemT) bytes), no alignment shift. A warp reads 32 consecutive output
// elements, which start wherever the row happens to start and may span two rows, so its request
// count depends on the rows' alignment. Grid-stride, per warp like the aligned kernel.
template <typename ElemT, typename IdT>
__global__ void gather_naive(const char* __restrict__ table, long long row_stride,
                             long long row_bytes, const IdT* __restrict__ ids,
                             const long long* __restrict__ perm, long long num_ids,
                             char* __restrict__ out, long long out_stride) {
  const long long elem = (long long)sizeof(ElemT);
  const long long elems_per_row = row_bytes / elem;
  const long long total = num_ids * elems_per_row;
  const long long lane = (long long)(threadIdx.x & 31u);
  const long long first = (long long)blockIdx.x * blockDim.x + threadIdx.x - lane;
  const long long stride = (long long)gridDim.x * blockDim.x;

  for (long long base = first; base < total; base += stride) {
    const long long i = base + lane;
    const bool active = i < total;
    const long long ii = active ? i : base;  // base < total: a valid element for masked lanes
    const long long j = ii / elems_per_row;
    const long long k = ii - j * elems_per_row;
    const ElemT* src =
        reinterpret_cast<const ElemT*>(table + (long long)ids[j] * row_stride + k * elem);
    const ElemT value = zc_load_if(src, active);
    char* dst_row = out + (perm != 0 ? perm[j] : j) * out_stride;
    zc_store_if(reinterpret_cast<ElemT*>(dst_row + k * elem), value, active);
  }
}

// Decoding gather: compressed rows read with the aligned scheme above, decoded in registers.
//
//   out[dst(j)][k] = OutT::encode(x),   x = CodeT::decode(table[ids[j]][k])           fp16, bf16
//                                       x = decode(code) * scale[c] + offset[c]       int8
//   c = k (per-column map) or ids[j] (per-row map)
//
// The table holds codes of sizeof(CodeT::bits) bytes; row_bytes and row_stride count code bytes.
// Reads are exactly gather_aligned's: the same VecT, windows, alignment and masking, chosen by the
// launcher from the code row (dgl_zerocopy/launch.py plan_decode), so a row of int8 codes costs
// the PCIe requests of a byte row a quarter of the fp32 width. Each lane decodes the
// sizeof(VecT) / sizeof(CodeT::bits) codes of its load and writes that many output elements at the
// same column of the output row, with stores of store_bytes (the widest that the output's base,
// stride and this chunk allow; at most 16).
//
// affine: (scale, offset) float pairs, interleaved so that one 8-byte load fetches both: one pair
// per column (device memory, read as ordinary loads) or, with affine_per_row, one per table row
// (may be pinned host memory: read once per row through zc_load_if, i.e. one PCIe request per row
// that the PCIe model counts). Unused (may be null) for formats without an affine map.
//
// ids are int32 (id_bytes 4) or int64 (8), read through a branch that is the same for the whole
// grid rather than a template parameter: every instantiation is compiled for every architecture
// in CI, and this halves their number at the cost of one uniform branch per row.
//
// Hot-row cache (zc_row_source above): cache_rows hold the host's *codes* (not decoded rows), so
// a hit goes through the same decode as a miss and the two are equal bit for bit. A hit's per-row
// (scale, offset) comes from cache_affine + 2 * slot (pairs of the cached rows, in device memory)
// when cache_affine is not null, else from the host pairs (one PCIe request per hit, which the
// PCIe model then counts).
template <typename CodeT, typename OutT, typename VecT>
__global__ void gather_decode(const char* __restrict__ table, long long row_stride,
                              long long row_bytes, const void* __restrict__ ids,
                              const long long* __restrict__ perm, long long num_ids,
                              char* __restrict__ out, long long out_stride,
                              const void* __restrict__ slot_map, int slot_bytes,
                              const char* __restrict__ cache_rows, long long cache_stride,
                              const float* __restrict__ affine, int affine_per_row,
                              const float* __restrict__ cache_affine,
                              int store_bytes, int id_bytes, int threads_per_row,
                              long long align_bytes, long long steps_per_row) {
  typedef typename CodeT::bits CodeBits;
  typedef typename OutT::bits OutBits;
  constexpr int kCodes = (int)(sizeof(VecT) / sizeof(CodeBits));  // codes per load
  constexpr int kChunk = kCodes * (int)sizeof(OutBits);           // output bytes per load
  constexpr int kChunkVecs = (kChunk + 15) / 16;
  static_assert(sizeof(VecT) % sizeof(CodeBits) == 0, "a load holds whole codes");
  const long long vec = (long long)sizeof(VecT);
  const long long window = (long long)threads_per_row * vec;
  const ZcRowGroups rows(threads_per_row);
  const unsigned long long align_mask = ~(unsigned long long)(align_bytes - 1);
  const bool per_row = CodeT::kAffine && affine_per_row != 0;  // the same for every thread

  for (long long first = rows.first; first < num_ids; first += rows.stride) {
    const long long j = first + rows.group;
    const bool row_active = j < num_ids;
    const long long jj = row_active ? j : first;
    const long long id = id_bytes == 4 ? (long long)static_cast<const int*>(ids)[jj]
                                       : static_cast<const long long*>(ids)[jj];
    long long slot;
    const unsigned long long src =
        zc_row_source(table, row_stride, id, slot_map, slot_bytes, cache_rows, cache_stride, slot);
    const unsigned long long end = src + (unsigned long long)row_bytes;
    const unsigned long long start = (src & align_mask) + (unsigned long long)rows.lane_in_row * vec;
    char* dst_row = out + (perm != 0 ? perm[jj] : jj) * out_stride;

    // The row's (scale, offset): every lane of the group loads the same 8 bytes, one request.
    float row_scale = 1.0f;
    float row_offset = 0.0f;
    if (per_row) {
      const float* row_pair = slot >= 0 && cache_affine != 0 ? cache_affine + 2 * slot : affine + 2 * id;
      const uint2 pair = zc_load_if(reinterpret_cast<const uint2*>(row_pair), row_active);
      row_scale = __uint_as_float(pair.x);
      row_offset = __uint_as_float(pair.y);
    }

    for (long long s0 = 0; s0 < steps_per_row; s0 += ZC_STEPS_IN_FLIGHT) {
      VecT value[ZC_STEPS_IN_FLIGHT];
      unsigned long long addr[ZC_STEPS_IN_FLIGHT];
      bool active[ZC_STEPS_IN_FLIGHT];
      zc_load_steps(start, s0, window, steps_per_row, src, end, row_active, value, addr, active);
      ZC_UNROLL
      for (int u = 0; u < ZC_STEPS_IN_FLIGHT; ++u) {
        if (!active[u]) {
          continue;
        }
        const long long column = (long long)(addr[u] - src) / (long long)sizeof(CodeBits);
        const CodeBits* codes = reinterpret_cast<const CodeBits*>(&value[u]);
        uint4 chunk[kChunkVecs];
        OutBits* decoded = reinterpret_cast<OutBits*>(chunk);
        ZC_UNROLL
        for (int i = 0; i < kCodes; ++i) {
          float x = CodeT::decode(codes[i]);
          if (CodeT::kAffine) {
            const float scale = per_row ? row_scale : affine[2 * (column + i)];
            const float offset = per_row ? row_offset : affine[2 * (column + i) + 1];
            x = zc_add_rn(zc_mul_rn(x, scale), offset);  // subnormals kept under -ftz (codecs.cuh)
          }
          decoded[i] = OutT::encode(x);
        }
        zc_store_chunk<kChunk>(dst_row + column * (long long)sizeof(OutBits), chunk, store_bytes);
      }
    }
  }
}

"""CPU gather of sampled feature rows: which way to slice a host table is fastest.

On real sampled batches of the synthetic graph (fanouts 15,10,5, batch 1024), compares
  fancy     ``feat[ids]``: what plain scripts do (new output per batch)
  dgl       DGL's prefetch path (``TensorStorage.fetch``, what ``prefetch_node_feats`` runs)
  select    ``torch.index_select(feat, 0, ids)``: new output per batch
  select_out ``torch.index_select(..., out=buf)`` into a reused buffer (the ``cpu`` backend)
  store     ``FeatureStore(backend="cpu").gather`` (select_out plus the id check)
against ``copy``: a plain copy of the same number of bytes into a reused buffer (the ceiling).

Compressed tables (``--feature-compression fp16,bf16,int8``): for each codec, the same batches
gathered to float32 rows by
  store_<codec>   ``FeatureStore(compress(feat, codec), backend="cpu").gather``: for int8 tile by tile
                  (256 KiB of codes per torch thread), each tile's codes gathered into a small reused
                  buffer and decoded at once into its rows of the output; for fp16/bf16 as twostep
  tiled_<codec>   the same with ``--tile-kb`` of codes per tile, whatever the threads (tile-size sweeps)
  twostep_<codec> the alternative: the whole batch's codes gathered into a reused buffer with
                  ``index_select(out=)``, then decoded into the output
  naive_<codec>   the reference ``codec.decode(codes[ids], ids)`` (new tensors per batch)
each checked equal to the reference first. GB/s are fp32-equivalent for every row: rows x columns
x 4 bytes delivered per second, so the compressed stores compare with ``store`` (fp32) directly.

    python bench/gathering/cpu_gather.py [--batches 8] [--repeats 5] [--feature-compression none,fp16,bf16,int8] [--out cpu_gather]
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: common.py
from common import command_line, machine, pyplot, save_figure, summarize, time_repeated, write_results  # noqa: E402

os.environ.setdefault("DGLBACKEND", "pytorch")


def sampled_batches(dataset, fanouts: list[int], batch_size: int, count: int, seed: int) -> list[torch.Tensor]:
    import dgl

    np.random.seed(seed)
    dgl.seed(seed)
    graph = dataset.to_dgl()
    loader = dgl.dataloading.DataLoader(
        graph, torch.from_numpy(dataset.train_idx), dgl.dataloading.NeighborSampler(fanouts), batch_size=batch_size, shuffle=True
    )
    batches = []
    for input_nodes, _, _ in loader:
        batches.append(input_nodes)
        if len(batches) == count:
            break
    return batches


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=8, help="sampled batches to gather")
    parser.add_argument("--repeats", type=int, default=5, help="timed gathers per batch and method")
    parser.add_argument("--num-nodes", type=int, default=200_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--plot", default=None, help="PNG path (default bench/results/<out>.png)")
    parser.add_argument("--feature-compression", default="none", help="comma-separated codecs to add (fp16, bf16, int8); none: the uncompressed methods only")
    parser.add_argument("--tile-kb", type=int, default=256, help="codes per tile of the tiled_<codec> method, KiB")
    parser.add_argument("--threads", type=int, help="torch threads (default: torch's, one per core)")
    parser.add_argument("--out", default="cpu_gather", help="result file stem under bench/results/ (<out>_raw for the raw rows)")
    args = parser.parse_args()

    from dgl.storages import TensorStorage

    from dgl_zerocopy import FeatureStore, compress
    from dgl_zerocopy.data import SyntheticSpec, load_dataset
    from dgl_zerocopy.store.compression import check_codec_name

    if args.threads:
        torch.set_num_threads(args.threads)
    codecs = [c for c in (check_codec_name(c.strip()) for c in args.feature_compression.split(",") if c.strip()) if c is not None]

    dataset = load_dataset("synthetic", synthetic=SyntheticSpec(num_nodes=args.num_nodes))
    feat = torch.from_numpy(dataset.features)
    batches = sampled_batches(dataset, [15, 10, 5], 1024, args.batches, args.seed)
    max_rows = max(len(b) for b in batches)
    buf = torch.empty((max_rows, feat.shape[1]), dtype=feat.dtype)
    store = FeatureStore(feat, backend="cpu", device="cpu")
    storage = TensorStorage(feat)
    row_bytes = feat.shape[1] * feat.element_size()
    stores = {c: FeatureStore(compress(feat, c), backend="cpu", device="cpu") for c in codecs}
    tiled = {c: _TiledDecode(s, args.tile_kb << 10) for c, s in stores.items()}
    twostep = {c: _TiledDecode(s, 1 << 62) for c, s in stores.items()}  # one tile: the whole batch

    rows = []
    for i, ids in enumerate(batches):
        n = len(ids)
        out = buf[:n]
        src = feat[:n]
        reference = feat[ids]
        methods = {
            "copy": lambda: out.copy_(src),
            "fancy": lambda: feat[ids],
            "dgl": lambda: storage.fetch(ids, "cpu"),
            "select": lambda: torch.index_select(feat, 0, ids),
            "select_out": lambda: torch.index_select(feat, 0, ids, out=out),
            "store": lambda: store.gather(ids),
        }
        decoded = {}
        for c, st in stores.items():
            methods[f"store_{c}"] = lambda st=st: st.gather(ids)
            methods[f"tiled_{c}"] = lambda t=tiled[c]: t.gather(ids, out)
            methods[f"twostep_{c}"] = lambda t=twostep[c]: t.gather(ids, out)
            methods[f"naive_{c}"] = lambda st=st: st.codec.decode(st._table[ids], ids)
            decoded.update(dict.fromkeys((f"store_{c}", f"tiled_{c}", f"twostep_{c}", f"naive_{c}"), st.codec.decode(st._table[ids], ids)))
        for name, fn in methods.items():
            if name != "copy":  # correctness first: every method equals feat[ids] (a compressed one: the reference decode)
                torch.testing.assert_close(fn(), decoded.get(name, reference), rtol=0, atol=0)
        # Round robin: one timed call of each method per round, so that a busy moment of the
        # machine falls on all of them alike rather than on whichever ran then.
        for _ in range(args.repeats):
            for name, fn in methods.items():
                (t,) = time_repeated(fn, 1, warmup=1)
                rows.append({"method": name, "batch": i, "rows": n, "bytes": n * row_bytes, "seconds": t, "gbps": n * row_bytes / t / 1e9})

    summary = []
    copy_median = summarize([r["gbps"] for r in rows if r["method"] == "copy"])["median"]
    for name in methods:
        s = summarize([r["gbps"] for r in rows if r["method"] == name])
        summary.append({"method": name, **{f"gbps_{k}": v for k, v in s.items()}, "ratio_to_copy": s["median"] / copy_median})

    meta = {
        "command": command_line(),
        "machine": machine(),
        "torch_threads": torch.get_num_threads(),
        "batches": f"{len(batches)} sampled batches, fanouts 15,10,5, batch 1024, median {int(np.median([len(b) for b in batches])):,} rows x {row_bytes} B",
    }
    if codecs:
        meta["compressed"] = (
            f"codecs {', '.join(codecs)} (int8 per column, min/max); GB/s are fp32-equivalent (rows x {feat.shape[1]} x 4 B); "
            f"tiles of {args.tile_kb} KiB of codes; ratio_to_store = GB/s / the fp32 store's"
        )
        store_median = next(s["gbps_median"] for s in summary if s["method"] == "store")
        for s in summary:
            s["ratio_to_store"] = s["gbps_median"] / store_median
    write_results(f"{args.out}_raw", rows, meta)
    csv_path, _ = write_results(args.out, summary, meta)
    _plot(summary, meta, args.plot or str(csv_path.with_suffix(".png")))

    print(f"# {meta['command']}\n# {meta['machine']}; {meta['batches']}")
    print("| method | GB/s median | GB/s q1–q3 | ratio to copy |" + (" ratio to fp32 store |\n|---|---|---|---|---|" if codecs else "\n|---|---|---|---|"))
    for s in summary:
        print(
            f"| {s['method']} | {s['gbps_median']:.2f} | {s['gbps_q1']:.2f}–{s['gbps_q3']:.2f} | {s['ratio_to_copy']:.2f} |"
            + (f" {s['ratio_to_store']:.2f} |" if codecs else "")
        )


class _TiledDecode:
    """Gather and decode a tile of ``tile_bytes`` of codes at a time, whatever the threads: each tile's
    codes go into a small reused buffer and are decoded at once into the tile's rows of the output.
    A tile larger than the batch is the two-step alternative (all codes first, then the decode).
    Same arithmetic as the store's Decoder."""

    def __init__(self, store, tile_bytes: int) -> None:
        from dgl_zerocopy.store.compression.decode import Decoder

        self.table = store._table
        self.decoder = Decoder(store.codec, torch.float32, torch.device("cpu"))
        self.rows = max(1, tile_bytes // (self.table.shape[1] * self.table.element_size()))
        self.tile = torch.empty((0, self.table.shape[1]), dtype=self.table.dtype)

    def gather(self, ids: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        out = out[: len(ids)]
        if self.tile.shape[0] < min(self.rows, len(ids)):
            self.tile = torch.empty((min(self.rows, len(ids)), self.table.shape[1]), dtype=self.table.dtype)
        for start in range(0, len(ids), self.rows):
            part = ids[start : start + self.rows]
            codes = torch.index_select(self.table, 0, part, out=self.tile[: len(part)])
            self.decoder(codes, part, out[start : start + len(part)])
        return out


def _plot(summary: list[dict], meta: dict, path: str) -> None:
    plt = pyplot()

    names = [s["method"] for s in summary]
    med = np.array([s["gbps_median"] for s in summary])
    err = np.array([[s["gbps_median"] - s["gbps_q1"] for s in summary], [s["gbps_q3"] - s["gbps_median"] for s in summary]])
    fig, ax = plt.subplots(figsize=(max(7, 0.6 * len(names)), 3.5))
    colors = {"store": "tab:orange", "tiled": "tab:green", "naive": "tab:red"}
    ax.bar(
        names,
        med,
        yerr=err,
        capsize=4,
        color=["grey"] + [colors.get(n.split("_")[0], "tab:blue") if "_" in n and n != "select_out" else "tab:blue" for n in names[1:]],
    )
    ax.tick_params(axis="x", labelrotation=45 if len(names) > 8 else 0, labelsize=8)
    ax.set_ylabel("GB/s (useful bytes, median, IQR)")
    ax.set_title("CPU gather of sampled rows\n" + meta["batches"], fontsize=9)
    save_figure(fig, path, dpi=120)


if __name__ == "__main__":
    main()

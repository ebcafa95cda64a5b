"""Draws docs/architecture.png, the data flow of one training batch. Run: python docs/draw_architecture.py"""

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch  # noqa: E402

# (x, y, width, height, title, detail, colour, module); lanes: host memory, sampler thread, side stream, training
BOXES = {
    "seeds": (0.2, 4.2, 2.0, 1.0, "seed nodes", "shuffled per epoch\nrng([seed, epoch])", "#e8e8e8", "loading/loader.py"),
    "sample": (2.8, 4.2, 2.6, 1.0, "DGL sampler", "worker thread,\n`prefetch` batches ahead", "#cfe2f3", "loading/prefetch.py"),
    "ids": (6.0, 4.2, 2.4, 1.0, "ring slot i+1", "input ids, blocks\n(reused, grown only)", "#cfe2f3", "loading/ring.py"),
    "table": (0.2, 0.4, 3.6, 1.3, "host feature table", "RAM or memory-mapped .npy,\npinned in place (cudaHostRegister)", "#fce5cd", "store/pinning.py"),
    "gather": (
        5.0,
        2.2,
        3.4,
        1.2,
        "FeatureStore.gather",
        "zerocopy: GPU warps read rows over PCIe\ncpu: index_select(out=) + async H2D",
        "#d9ead3",
        "store/ -> cuda/gather/launcher.py",
    ),
    "event": (9.6, 2.2, 2.2, 1.2, "ready event", "per slot, on the\nside stream", "#d9ead3", "loading/ring.py"),
    "train": (9.6, 4.2, 2.8, 1.0, "training step i", "model(blocks, x) on\nthe current stream", "#f4cccc", "training/train.py"),
}
#: The package's layers, lowest first: each imports only the ones to its left (tests/package/test_layout.py).
LAYERS = "dgl_zerocopy/ layers:  cuda/  <  store/  <  data/  <  loading/  <  nn.py  <  training/  <  dist/  <  cli.py"
# (from box, side, to box, side, label); sides: l, r, t, b
ARROWS = [
    ("seeds", "r", "sample", "l", ""),
    ("sample", "r", "ids", "l", ""),
    ("ids", "b", "gather", "t", "ids"),
    ("table", "r", "gather", "l", "rows, 128-B aligned"),
    ("gather", "r", "event", "l", "x into slot"),
    ("event", "t", "train", "b", "wait_event"),
    ("train", "l", "ids", "r", "release event"),
]


def _side(name: str, side: str) -> tuple[float, float]:
    x, y, w, h, *_ = BOXES[name]
    return {"l": (x - 0.05, y + h / 2), "r": (x + w + 0.05, y + h / 2), "t": (x + w / 2, y + h + 0.05), "b": (x + w / 2, y - 0.05)}[side]


def main() -> None:
    fig, ax = plt.subplots(figsize=(12, 6))
    for x, y, w, h, title, detail, colour, module in BOXES.values():
        ax.add_patch(FancyBboxPatch((x, y), w, h, boxstyle="round,pad=0.05", fc=colour, ec="#444"))
        ax.text(x + w / 2, y + h * 0.80, title, ha="center", va="center", fontsize=10, weight="bold")
        ax.text(x + w / 2, y + h * 0.47, detail, ha="center", va="center", fontsize=8)
        ax.text(x + w / 2, y + 0.1, module, ha="center", va="center", fontsize=7.5, style="italic", color="#555")
    for a, sa, b, sb, label in ARROWS:
        (x0, y0), (x1, y1) = _side(a, sa), _side(b, sb)
        ax.add_patch(FancyArrowPatch((x0, y0), (x1, y1), arrowstyle="-|>", mutation_scale=14, color="#333", shrinkA=0, shrinkB=0))
        if label:
            ax.text(
                (x0 + x1) / 2 + (0.08 if sa in "tb" else 0),
                (y0 + y1) / 2 + (0.08 if sa in "tb" else 0.15),
                label,
                fontsize=8,
                ha="left" if sa in "tb" else "center",
                color="#333",
            )
    ax.text(0.2, 5.7, "batch i trains while batch i+1 is sampled (thread) and gathered (side stream)", fontsize=11)
    ax.set_xlim(0, 12.6)
    ax.text(0.2, -0.45, LAYERS, fontsize=9, family="monospace", color="#333")
    ax.set_ylim(-0.7, 6.1)
    ax.axis("off")
    out = Path(__file__).with_name("architecture.png")
    fig.savefig(out, dpi=110, bbox_inches="tight")
    print(out)


if __name__ == "__main__":
    main()

"""The instantiations of the sampling kernels (``kernels/sample.cu``): their template arguments
(indptr, seed and indices widths) and names, which NVRTC compiles and the launcher and the CPU
emulator look up. Pure Python.
"""

from __future__ import annotations

__all__ = ["FETCH_VARIANTS", "ID_TYPES", "SOURCE", "all_name_expressions", "bounds_name", "count_name", "fetch_name", "pick_name", "relabel_names"]

#: The kernel source file in ``kernels/``.
SOURCE = "sample.cu"
#: CUDA type of each integer width (int32 and int64 indptr, seeds and indices).
ID_TYPES = {4: "int", 8: "long long"}
#: Thread layouts of the fetch pass: ``"flat"`` (a thread per output edge, what sample_csc runs)
#: and ``"per_seed"`` (a thread per seed, the PCIe model's comparison point).
FETCH_VARIANTS = {"flat": "sample_fetch", "per_seed": "sample_fetch_per_seed"}


def _width(name: str, nbytes: int) -> str:
    if nbytes not in ID_TYPES:
        raise ValueError(f"{name} must be 4 (int32) or 8 (int64) bytes wide, but got {nbytes}")
    return ID_TYPES[nbytes]


def bounds_name(indptr_bytes: int, seed_bytes: int) -> str:
    """``sample_bounds<PtrT, SeedT>`` for the widths of indptr and seeds."""
    return f"sample_bounds<{_width('indptr', indptr_bytes)}, {_width('seeds', seed_bytes)}>"


def count_name() -> str:
    """``sample_count`` (int64 device arrays only: one instantiation)."""
    return "sample_count"


def pick_name() -> str:
    """``sample_pick`` (int64 device arrays only: one instantiation)."""
    return "sample_pick"


def fetch_name(indices_bytes: int, variant: str = "flat") -> str:
    """``sample_fetch<IdT>`` (or the per-seed variant) for the width of indices."""
    if variant not in FETCH_VARIANTS:
        raise ValueError(f"variant must be one of {tuple(FETCH_VARIANTS)}, but got {variant!r}")
    return f"{FETCH_VARIANTS[variant]}<{_width('indices', indices_bytes)}>"


def relabel_names(node_bytes: int, id_bytes: int) -> tuple[str, str, str]:
    """``(relabel_insert, relabel_mark, relabel_write)`` for the widths of the block's node ids
    (destinations and outputs) and of the picked ids."""
    node, ids = _width("nodes", node_bytes), _width("ids", id_bytes)
    return f"relabel_insert<{node}, {ids}>", f"relabel_mark<{ids}>", f"relabel_write<{node}, {ids}>"


def all_name_expressions() -> tuple[str, ...]:
    """Every instantiation (compiled together into one module, and into the emulator): 4 bounds
    (indptr x seed widths), count, pick, 2 x 2 fetches (indices widths x variants), and the
    relabelling's 4 inserts, 2 marks and 4 writes (node x id widths): 20."""
    widths = sorted(ID_TYPES)
    relabel = dict.fromkeys(name for n in widths for i in widths for name in relabel_names(n, i))
    return (
        *(bounds_name(p, s) for p in widths for s in widths),
        count_name(),
        pick_name(),
        *(fetch_name(w, v) for v in FETCH_VARIANTS for w in widths),
        *relabel,
    )

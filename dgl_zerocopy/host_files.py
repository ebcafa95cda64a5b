"""Host arrays and the folders that hold them: helpers shared by the data loaders and the
compressed tables. Imports nothing of dgl_zerocopy, so every layer may use it."""
from __future__ import annotations

import os
import shutil
import tempfile
import warnings
from pathlib import Path

import numpy as np


def tensor_view(array: np.ndarray):
    """``torch.from_numpy(array)`` (shares memory) without torch's warning for read-only arrays:
    datasets and compressed codes may be read-only memory maps, and nothing in this package
    writes to them."""
    import torch

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        return torch.from_numpy(array)


def replace_dir(tmp: Path, out: Path, marker: str) -> None:
    """Rename the finished folder ``tmp`` to ``out``, moving an older ``out`` aside first (a reader
    that mapped its files keeps them: removing a mapped file leaves its pages to whoever maps it).
    If another process finished ``out`` meanwhile (its ``marker`` file exists), keep theirs."""
    if out.exists():
        old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old.", dir=out.parent))
        os.replace(out, old / out.name)
        shutil.rmtree(old, ignore_errors=True)
    try:
        os.replace(tmp, out)
    except OSError:
        if not (out / marker).is_file():
            raise
        shutil.rmtree(tmp, ignore_errors=True)  # a concurrent writer won the race: same data

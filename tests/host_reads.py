"""Counting every way a tensor's value reaches Python, for the tests that bound the host reads of a batch."""

from __future__ import annotations

from collections import Counter

import torch

from dgl_zerocopy.sampling import relabel

#: The torch.Tensor methods that read a value back to Python.
VALUE_READS = ("item", "tolist", "numpy", "__int__", "__index__", "__bool__", "__float__", "__array__")


def count_host_reads(monkeypatch) -> Counter:
    """From now until ``monkeypatch.undo()``: each call of a ``VALUE_READS`` method, counted under its
    name, and each ``relabel.read_sizes`` (the sampler's one size read a batch) as ``"read_sizes"``.

    Args:
        monkeypatch: the calling test's fixture (undoing it ends the count).

    Returns:
        The counter the calls add to, empty at first.
    """
    counts = Counter()
    for name in VALUE_READS:
        original = getattr(torch.Tensor, name)

        def counted(self, *args, _original=original, _name=name, **kwargs):
            counts[_name] += 1
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(torch.Tensor, name, counted)
    original_read = relabel.read_sizes
    monkeypatch.setattr(relabel, "read_sizes", lambda t: counts.update(["read_sizes"]) or original_read(t))
    return counts

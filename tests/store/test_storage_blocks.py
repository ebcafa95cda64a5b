"""The direct reader's block: the smallest direct read the file accepts, probed at
open, so that a row smaller than a page costs its sectors; rows exact whatever the block."""

from __future__ import annotations

import errno

import numpy as np
import pytest

from dgl_zerocopy.store.storage import direct_reader
from dgl_zerocopy.store.storage.direct_reader import BLOCK, DirectReader

ROWS, ROW_BYTES, OFFSET = 2000, 384, 128  # rows straddle 512-byte sectors


@pytest.fixture()
def table(tmp_path):
    path = tmp_path / "rows.bin"
    data = np.random.default_rng(0).integers(0, 256, (ROWS, ROW_BYTES), dtype=np.uint8)
    path.write_bytes(b"h" * OFFSET + data.tobytes())
    return path, data


def _read(reader: DirectReader, rows: np.ndarray) -> np.ndarray:
    dest = np.zeros((rows.size, ROW_BYTES), dtype=np.uint8)
    reader.read_into(rows, dest, np.arange(rows.size))
    return dest


@pytest.mark.parametrize("smallest", [512, 2048, BLOCK])
def test_the_block_is_the_smallest_direct_read_accepted(table, monkeypatch, smallest):
    path, data = table
    real = direct_reader.os.preadv

    def aligned_only(fd, buffers, offset):  # a device whose logical block is `smallest`
        if offset % smallest or sum(len(b) for b in buffers) % smallest:
            raise OSError(errno.EINVAL, "Invalid argument")
        return real(fd, buffers, offset)

    monkeypatch.setattr(direct_reader.os, "preadv", aligned_only)
    reader = DirectReader(path, OFFSET, ROW_BYTES, ROWS)
    try:
        if not reader.direct:
            pytest.skip("this file system refuses O_DIRECT: buffered reads use whole pages")
        assert reader.block == smallest
        rows = np.unique(np.random.default_rng(1).integers(0, ROWS, 300))
        assert np.array_equal(_read(reader, rows), data[rows])
    finally:
        reader.close()


def test_a_row_costs_the_blocks_it_touches(table):
    path, data = table
    reader = DirectReader(path, OFFSET, ROW_BYTES, ROWS)
    try:
        rows = np.array([10, 700, 1500])  # far apart: one read each
        assert np.array_equal(_read(reader, rows), data[rows])
        start = OFFSET + rows * ROW_BYTES
        blocks = (start + ROW_BYTES - 1) // reader.block - start // reader.block + 1
        stats = reader.stats.as_dict()
        assert stats["storage_reads"] == 3 and stats["storage_bytes"] == int(blocks.sum()) * reader.block
        assert reader.block <= BLOCK
    finally:
        reader.close()

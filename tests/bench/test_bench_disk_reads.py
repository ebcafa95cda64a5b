"""bench/tiers/disk_reads.py: a tiny run into a temporary folder (never bench/results/): a row per thread
count with positive rates and CPU times, the file written once and kept."""

from __future__ import annotations

import errno
import os

import pytest
from script_runs import run_bench


def test_a_tiny_run_measures_each_thread_count(tmp_path):
    probe = tmp_path / "probe"
    probe.write_bytes(b"\0" * 4096)
    try:
        os.close(os.open(probe, os.O_RDONLY | os.O_DIRECT))
    except OSError as e:  # tmpfs and some others refuse O_DIRECT; the bench reads past the page cache or not at all
        assert e.errno == errno.EINVAL
        pytest.skip(f"{tmp_path} refuses O_DIRECT")
    data = tmp_path / "data.bin"
    args = ["--file", data, "--size-mib", "2", "--threads", "1,2", "--reads", "400"]
    r, result = run_bench("bench/tiers/disk_reads.py", *args, "--out-dir", tmp_path, results=tmp_path / "disk_reads.json", timeout=120)
    assert data.stat().st_size == 2 << 20
    rows = result["rows"]
    assert [(row["threads"], row["reads"], row["block"]) for row in rows] == [(1, 400, 512), (2, 400, 512)]
    assert all(row["reads_per_s"] > 0 and row["user_us_per_read"] + row["sys_us_per_read"] > 0 for row in rows)
    assert r.stdout.splitlines()[0].startswith("  1 threads: ")

"""bench/training/scale.py: its blocks from a HopSampler neighbourhood, the DGL side-by-side's refusal
where DGL's graph would not fit, ``--device cuda`` without CUDA refused in one line, a stage that fails
recorded in its row (fast tier); a tiny run written to a temporary folder, never bench/results/, with
DGL's sampler beside ours (slow tier). The GPU route: tests/bench/test_bench_scale_gpu.py."""

import importlib.util
import json
import sys

import numpy as np
import pytest
import torch
from conftest import CUDA, REPO
from script_runs import run_bench, run_python

from dgl_zerocopy.data import papers_disk as pd
from dgl_zerocopy.data.disk_graph import open_disk_graph
from dgl_zerocopy.data.synthetic import SyntheticSpec
from dgl_zerocopy.sampling.disk import hop_sampler

sys.path.insert(0, str(REPO / "bench" / "training"))
import scale  # noqa: E402


def test_blocks_hold_every_sampled_edge_once_by_hop(tmp_path):
    graph = open_disk_graph(pd.generate_to_disk(tmp_path / "g", SyntheticSpec.papers100m_like(num_nodes=3_000), block_nodes=1_000, progress=False))
    s = hop_sampler(graph).sample({"_N": np.array([3, 1, 2_000])}, {"_E": [4, 3, 2]}, rng=np.random.default_rng(1))
    blocks = scale._blocks(s, 3)
    counts = np.cumsum(s.nodes_per_hop["_N"])
    assert [b.num_dst_nodes() for b in blocks] == [counts[2], counts[1], counts[0]]
    assert [b.num_src_nodes() for b in blocks] == [counts[3], counts[2], counts[1]]
    nodes = s.nodes["_N"]
    for block in blocks:
        dst = np.repeat(np.arange(block.num_dst_nodes()), np.diff(block.indptr.numpy()))
        got = sorted(zip(nodes[block.indices.numpy()].tolist(), nodes[dst].tolist()))
        e = block.num_edges()
        want = sorted(zip(nodes[s.row["_E"][:e]].tolist(), nodes[s.col["_E"][:e]].tolist()))
        assert got == want
        for src, d in got:
            assert src in graph.indices[graph.indptr[d] : graph.indptr[d + 1]]
    assert scale._check_against_files(graph, s) == 0
    assert isinstance(blocks[0].indptr, torch.Tensor)


@pytest.mark.slow  # two child processes per fraction, each importing torch
def test_a_tiny_run_writes_its_results_to_the_given_folder(tmp_path):
    out = tmp_path / "out"
    args = [
        "--fractions",
        "0.0001",
        "--data-dir",
        str(tmp_path / "data"),
        "--batches",
        "1",
        "--steps",
        "6",
        "--dgl",
        "--out-dir",
        str(out),
        "--stem",
        "scale_test",
    ]
    _, result = run_bench("scale", *args, results=out / "scale_test.json", timeout=300)
    for suffix in (".csv", ".json", ".png"):
        assert (out / f"scale_test{suffix}").stat().st_size > 0
    (row,) = result["rows"]
    assert row["nodes"] == 11_106 and row["loss_falls"] and row["sampled_edges_per_s"] > 0 and row["disk_gb"] > 0
    assert (row["status"], row["device"]) == ("ok", "cpu") and "pin_s" not in row
    if importlib.util.find_spec("dgl") is not None:  # DGL's sampler over the same CSC and seeds
        assert row["dgl_status"] == "ok" and row["dgl_sampled_edges_per_batch"] > 0 and row["dgl_ns_per_sampled_edge"] > 0
    else:
        assert row["dgl_status"].startswith("skipped")


@pytest.mark.slow
def test_a_stage_that_fails_is_recorded_in_its_row(tmp_path):
    """The data folder is a file: the generate stage fails; the row says where and why, the run exits 1."""
    (tmp_path / "data").write_text("not a folder")
    args = ["--fractions", "0.0001", "--data-dir", str(tmp_path / "data"), "--out-dir", str(tmp_path / "out"), "--stem", "failed"]
    r, result = run_bench("bench/training/scale.py", *args, results=tmp_path / "out" / "failed.json", returncode=1, timeout=300)
    (row,) = result["rows"]
    assert row["status"].startswith("failed: generate: ") and row["device"] == "cpu", row
    assert "Traceback" in r.stderr and not (tmp_path / "out" / "failed.png").exists()


@pytest.mark.slow
@pytest.mark.skipif(CUDA, reason="checks the machine without a GPU")
def test_device_cuda_without_cuda_is_one_clear_line(tmp_path):
    """Before any work: one line on stderr, exit 2, nothing generated or written."""
    args = ["--device", "cuda", "--fractions", "0.0001", "--data-dir", str(tmp_path / "data"), "--out-dir", str(tmp_path / "out")]
    r = run_python("bench/training/scale.py", *args)
    assert (r.returncode, r.stdout) == (2, "")
    assert r.stderr.strip().splitlines() == [
        "scale.py: --device cuda needs a CUDA GPU, but torch.cuda.is_available() is False here; leave --device out to run on the CPU"
    ]
    assert not (tmp_path / "data").exists() and not (tmp_path / "out").exists()


def test_dgl_is_not_built_where_its_graph_would_not_fit(monkeypatch):
    """The full size needs over 50 GB as a DGL graph: with 24 GB available the row says so instead of trying."""
    assert scale.dgl_graph_bytes(111_059_956, 3_235_338_793) > 50e9
    pytest.importorskip("dgl")
    psutil = pytest.importorskip("psutil")
    monkeypatch.setattr(psutil, "virtual_memory", lambda: type("M", (), {"available": 24e9})())
    graph = type("G", (), {"num_nodes": 111_059_956, "num_edges": 3_235_338_793})()
    row = scale._dgl_side_by_side(graph, [], [15, 10, 5])
    assert row["dgl_status"].startswith("does not fit: a DGL graph needs at least 52.7 GB") and "dgl_sample_ms_median" not in row


def test_rows_where_dgl_fit_and_did_not_are_written_and_drawn_together(tmp_path):
    """The full size's row lacks DGL's timings (its graph does not fit): the CSV leaves those cells
    empty rather than failing after hours of runs, and the plot draws both."""
    from common import write_results

    base = {"edges": 3.2e7, "ns_per_sampled_edge": 50.0, "ns_per_gathered_byte": 17.0}
    rows = [
        {"fraction": 0.01, **base, "dgl_status": "ok", "dgl_graph_gb": 0.5, "dgl_build_s": 0.7, "dgl_ns_per_sampled_edge": 67.6},
        {"fraction": 1.0, **base, "edges": 3.2e9, "dgl_status": "does not fit: a DGL graph needs at least 52.7 GB", "dgl_graph_gb": 52.7},
    ]
    csv_path, json_path = write_results("mixed", rows, {"command": "test"}, tmp_path)
    lines = [line for line in csv_path.read_text().splitlines() if not line.startswith("#")]
    header, fit, full = (line.split(",") for line in lines)
    assert header == [
        "fraction",
        "edges",
        "ns_per_sampled_edge",
        "ns_per_gathered_byte",
        "dgl_status",
        "dgl_graph_gb",
        "dgl_build_s",
        "dgl_ns_per_sampled_edge",
    ]
    assert fit[header.index("dgl_build_s")] == "0.7" and full[header.index("dgl_build_s")] == "" and full[header.index("dgl_graph_gb")] == "52.7"
    assert json.loads(json_path.read_text())["rows"] == rows
    scale._plot(rows, tmp_path / "mixed.png")
    assert (tmp_path / "mixed.png").stat().st_size > 0

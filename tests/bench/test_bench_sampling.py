"""bench/sampler/sampling.py: its check catches broken samples, its seed batches, its time limit and labels; a
smoke run at a tiny size (slow tier) through ``dgl-zerocopy bench sampling`` writing CSV, JSON and PNG
whose figures are positive and consistent (edges counted = the sum of the blocks' edges)."""

import json
import os
import statistics
import sys

import numpy as np
import pytest
import torch
from conftest import CUDA, REPO
from script_runs import run_bench

from dgl_zerocopy.data.synthetic import SyntheticSpec, generate
from dgl_zerocopy.loading.blocks import EID, NID, DeviceBlock
from dgl_zerocopy.sampling import GpuNeighborSampler, SamplingGraph

sys.path.insert(0, str(REPO / "bench" / "sampler"))
import sampling  # noqa: E402

FANOUTS = [4, 3]


@pytest.fixture(scope="module")
def graph():
    d = generate(SyntheticSpec(num_nodes=400, avg_degree=8, feat_dim=1))
    return torch.from_numpy(d.indptr), torch.from_numpy(d.indices), d


def _sample(graph, seeds, seed=0):
    torch.manual_seed(seed)
    with SamplingGraph(graph[0], graph[1]) as g, GpuNeighborSampler(FANOUTS, device="reference") as s:
        sampled = s.sample_blocks(g, seeds)
        for block in sampled[2]:
            block.edata[EID]  # computed while the graph is open
        return sampled


def _rebuilt(block, **change):
    """``block`` as a plain DeviceBlock, some of its tensors replaced."""
    parts = {"indptr": block.indptr, "indices": block.indices, "src": block.srcdata[NID], "dst": block.dstdata[NID], "eid": block.edata[EID]}
    parts.update(change)
    return DeviceBlock(parts["indptr"], parts["indices"], parts["src"].numel(), {NID: parts["src"]}, {NID: parts["dst"]}, edata={EID: parts["eid"]})


def test_the_check_passes_a_good_sample_and_catches_broken_ones(graph):
    indptr, indices, _ = graph
    seeds = torch.arange(0, 400, 7)
    good = _sample(graph, seeds)
    sampling.check_batch(indptr, indices, seeds, good, FANOUTS, replace=False)
    inputs, outputs, blocks = good
    last = blocks[-1]
    broken = {
        "sampled in-edges, expected": _rebuilt(
            last, indptr=torch.cat([last.indptr[:1], last.indptr[1:] - 1]).clamp(min=0), indices=last.indices[1:], eid=last.edata[EID][1:]
        ),
        "is not an in-edge of the graph": _rebuilt(last, eid=last.edata[EID].flip(0)),
        "not the first source nodes": _rebuilt(last, src=torch.cat([last.srcdata[NID][1:2], last.srcdata[NID][:1], last.srcdata[NID][2:]])),
    }
    for message, block in broken.items():
        with pytest.raises(sampling.CheckError, match=message):
            sampling.check_batch(indptr, indices, seeds, (inputs, outputs, [blocks[0], block]), FANOUTS, replace=False)
    twice = _rebuilt(last, eid=torch.cat([last.edata[EID][:1], last.edata[EID][:-1]]))
    with pytest.raises(sampling.CheckError):
        sampling.check_batch(indptr, indices, seeds, (inputs, outputs, [blocks[0], twice]), FANOUTS, replace=False)
    with pytest.raises(sampling.CheckError, match="input_nodes differ"):
        sampling.check_batch(indptr, indices, seeds, (inputs[:-1], outputs, blocks), FANOUTS, replace=False)
    sampling.check_same_as(good, _sample(graph, seeds))
    with pytest.raises(sampling.CheckError, match="differ from the reference backend's"):
        sampling.check_same_as(good, _sample(graph, seeds, seed=1))


def test_seed_batches_are_distinct_seeds_from_the_training_split():
    batches = sampling.seed_batches(np.arange(100, 200), 1000, 30, 5, seed=0)
    assert [b.numel() for b in batches] == [30] * 5
    assert all(b.unique().numel() == 30 and bool(((b >= 100) & (b < 200)).all()) for b in batches)
    assert torch.cat(batches[:3]).unique().numel() == 90, "one pass deals each training node once"
    assert all(torch.equal(a, b) for a, b in zip(batches, sampling.seed_batches(np.arange(100, 200), 1000, 30, 5, seed=0)))
    small = sampling.seed_batches(np.arange(5), 50, 20, 2, seed=0)
    assert all(b.unique().numel() == 20 for b in small), "a split smaller than a batch: every node is the pool"
    with pytest.raises(ValueError, match="--batch-size 64 is larger than the graph's 50 nodes"):
        sampling.seed_batches(np.arange(5), 50, 64, 1, seed=0)


def test_summary_figures_come_from_the_repeats():
    raw = {"seconds": [0.5, 0.25, 1.0], "edges": [1000, 1000, 1000], "layer_edges": [[300, 150, 50], [320, 130, 50]], "input_nodes": [40, 60]}
    row = sampling.summary_row({"method": "x"}, raw, batches=2)
    assert row["ms_per_batch_median"] == 250.0 and row["ms_per_batch_min"] == 125.0 and row["ms_per_batch_max"] == 500.0
    assert row["medges_per_s_median"] == pytest.approx(0.002) and row["medges_per_s_max"] == pytest.approx(0.004)
    assert row["edges_per_batch"] == 500.0 and row["layer_edges"] == "310/140/50" and row["seed_layer_edges"] == 100
    assert row["input_nodes_per_batch"] == 50.0


def test_methods_left_out_are_rows_that_say_why(tmp_path, monkeypatch):
    """A time limit already spent, and (without CUDA) the GPU methods: rows that say so, files written, exit 0."""
    monkeypatch.setenv("DGL_ZEROCOPY_CACHE", str(tmp_path / "cache"))
    stem = tmp_path / "s"
    code = sampling.main(["--num-nodes", "400", "--batch-size", "16", "--methods", "reference,emulator", "--time-limit", "1e-9", "--out", str(stem)])
    rows = json.loads(stem.with_suffix(".json").read_text())["rows"]
    assert code == 0 and [(r["method"], r["status"]) for r in rows] == [("reference", sampling.TIME_LIMIT_STATUS), ("emulator", sampling.TIME_LIMIT_STATUS)]
    assert stem.with_suffix(".csv").is_file() and stem.with_suffix(".png").is_file()
    if not CUDA:
        assert sampling.unavailable("gpu-pinned") == "skipped: no CUDA GPU here (torch.cuda.is_available() is False)"
        assert sampling.default_methods() == ["dgl-cpu", "reference", "emulator"]
    assert all(sampling.WHAT[m].startswith("GPU measurement") for m in sampling.GPU_METHODS)
    assert all(sampling.WHAT[m].endswith("NOT a GPU figure") for m in ("reference", "emulator", "snapshot-reference"))


def test_the_tree_check_passes_temporal_samples_and_catches_a_later_edge(graph):
    """hops-disjoint and hops-temporal (each seed its own tree): valid samples pass (the temporal one equal to the
    NumPy path); edges later than their seed's time are named."""
    import sampling_hops

    indptr, indices, _ = graph
    seeds = torch.arange(0, 400, 7)
    for name in sampling_hops.TREE_METHODS:
        torch.manual_seed(3)
        out = sampling_hops.build(name, indptr, indices, FANOUTS, replace=False)(seeds)
        assert "batch 0: " in sampling_hops.check_trees(name, indptr, indices, seeds, out, FANOUTS, False, 3)
    # Checked against the seed times another torch seed draws, the same batch has edges later than them.
    with pytest.raises(sampling_hops.HopCheckError, match="later than its tree's seed time"):
        sampling_hops.check_trees("hops-temporal", indptr, indices, seeds, out, FANOUTS, False, 4)


def test_the_hop_check_passes_our_pyg_layout_samples_and_catches_broken_ones(graph):
    """pyg-cpu, hops-cpu and hops-numpy (bench/sampler/sampling_hops.py): valid samples pass, equal for one torch seed; each
    broken part is named."""
    pytest.importorskip("torch_geometric")
    import sampling_hops

    indptr, indices, _ = graph
    seeds = torch.arange(0, 400, 7)
    samples = {}
    for name in (m for m in sampling_hops.HOP_METHODS if m not in sampling_hops.TREE_METHODS):
        torch.manual_seed(3)
        samples[name] = sampling_hops.build(name, indptr, indices, FANOUTS, replace=False)(seeds)
        sampling.check_hops(indptr, indices, seeds, samples[name], FANOUTS, replace=False)
    sampling.check_same(samples["pyg-cpu"], samples["hops-cpu"])
    sampling.check_same(samples["hops-numpy"], samples["hops-cpu"])
    hops = sampling_hops.as_hops(samples["hops-cpu"])
    assert sampling_hops.counts(samples["pyg-cpu"]) == (hops.edges_per_hop[::-1], len(hops.nodes))
    assert hops.edges_per_hop[0] == int(torch.clamp(indptr[seeds + 1] - indptr[seeds], max=FANOUTS[-1]).sum()), "the seeds' hop: min(deg, fanout)"
    first = hops.edges_per_hop[0]
    broken = {
        "first nodes are not the seeds": dict(nodes=np.concatenate([hops.nodes[1:2], hops.nodes[:1], hops.nodes[2:]])),
        "sampled in-edges, expected": dict(col=np.where(np.arange(len(hops.col)) == 0, (hops.col[0] + 1) % len(seeds), hops.col)),
        "not an in-edge of the graph": dict(pos=np.where(np.arange(len(hops.pos)) == 0, hops.pos[0] + 1, hops.pos)),
        "did not join at the hop before": dict(col=np.where(np.arange(len(hops.col)) == first, 0, hops.col)),
    }
    for message, change in broken.items():
        bad = sampling_hops.Hops(**{**hops.__dict__, **change})
        with pytest.raises(sampling_hops.HopCheckError, match=message):
            sampling.check_hops(indptr, indices, seeds, _as_sampled(bad), FANOUTS, replace=False)
    with pytest.raises(sampling_hops.HopCheckError, match="differ from hops-cpu's"):
        torch.manual_seed(4)
        sampling.check_same(sampling_hops.build("hops-cpu", indptr, indices, FANOUTS, replace=False)(seeds), samples["hops-cpu"])


def _as_sampled(h):
    """A :class:`sampling_hops.Hops` back in HopSampler's output form."""
    from dgl_zerocopy.sampling.cpu_hops import Sampled

    one = lambda v: {"node": v}  # noqa: E731
    return Sampled(one(h.nodes), one(h.row), one(h.col), one(h.pos), one(h.nodes_per_hop), one(h.edges_per_hop))


def test_our_cpu_samplers_interleaved_with_the_reference_give_checked_rows(tmp_path, monkeypatch):
    """pyg-cpu and hops-cpu in one run with --interleave: one repeat of each in turn, every row checked and
    measured, the two equal in their edges (one torch seed: the same picks)."""
    pytest.importorskip("torch_geometric")
    monkeypatch.setenv("DGL_ZEROCOPY_CACHE", str(tmp_path / "cache"))
    stem = tmp_path / "s"
    argv = ["--num-nodes", "400", "--batch-size", "16", "--batches", "2", "--repeats", "3", "--methods", "pyg-cpu,hops-cpu,reference", "--interleave"]
    assert sampling.main([*argv, "--out", str(stem)]) == 0
    data = json.loads(stem.with_suffix(".json").read_text())
    rows = {r["method"]: r for r in data["rows"]}
    assert list(rows) == ["pyg-cpu", "hops-cpu", "reference"] and all(r["status"] == "ok" for r in rows.values())
    assert rows["pyg-cpu"]["checked"].endswith("equal to hops-cpu") and rows["hops-cpu"]["checked"].startswith("batch 0: seeds first")
    for name, row in rows.items():
        raw = data["raw"][name]
        assert len(raw["seconds"]) == 3 and len(raw["batch_seconds"]) == 6, name
        assert row["batch_ms_q1"] <= row["batch_ms_median"] <= row["batch_ms_q3"]
    assert rows["pyg-cpu"]["what"].startswith("CPU measurement") and "interleaved" in data["meta"]["timing"]
    assert sampling.HOPS_NOTE in data["meta"]["note"]


@pytest.mark.slow
def test_smoke_run_through_the_cli_writes_consistent_figures(tmp_path):
    pytest.importorskip("dgl")
    stem = tmp_path / "out" / "sampling"
    args = ["--num-nodes", "3000", "--batch-size", "64", "--batches", "3", "--repeats", "2", "--warmup", "1", "--methods", "dgl-cpu,reference,emulator"]
    env = {**os.environ, "DGL_ZEROCOPY_CACHE": str(tmp_path / "cache"), "MPLBACKEND": "Agg"}
    r, data = run_bench("sampling", *args, out=stem, env=env)
    assert all(stem.with_suffix(s).stat().st_size > 0 for s in (".csv", ".json", ".png"))
    assert data["meta"]["command"].endswith("sampling.py " + " ".join(args) + f" --out {stem}")
    assert data["meta"]["device"].startswith("cpu (no GPU") or CUDA
    rows = {row["method"]: row for row in data["rows"]}
    assert list(rows) == ["dgl-cpu", "reference", "emulator"] and all(row["status"] == "ok" for row in rows.values())
    csv_lines = [ln for ln in stem.with_suffix(".csv").read_text().splitlines() if not ln.startswith("#")]
    assert len(csv_lines) == 4 and csv_lines[0].startswith("method,what,")
    # The seed layer's edges follow from the graph alone: min(in-degree, fanout) per seed (no replacement).
    d = generate(SyntheticSpec(num_nodes=3000, avg_degree=50.5, feat_dim=1))
    degree = np.diff(d.indptr)
    seeds = torch.cat(sampling.seed_batches(d.train_idx, d.num_nodes, 64, 3, seed=0)).numpy()
    expected_seed_layer = int(np.minimum(degree[seeds], 5).sum())
    for name, row in rows.items():
        raw = data["raw"][name]
        assert all(s > 0 for s in raw["seconds"]) and row["ms_per_batch_median"] > 0 and row["medges_per_s_median"] > 0, name
        per_batch = [sum(layers) for layers in raw["layer_edges"]]
        assert raw["edges"][0] == sum(per_batch), "edges counted = the sum of the blocks' edges"
        assert row["edges_per_batch"] == pytest.approx(statistics.mean(per_batch))
        rates = [e / s / 1e6 for e, s in zip(raw["edges"], raw["seconds"])]
        assert row["medges_per_s_median"] == pytest.approx(statistics.median(rates))
        assert row["ms_per_batch_median"] == pytest.approx(statistics.median(s / 3 * 1e3 for s in raw["seconds"]))
        assert row["seed_layer_edges"] == expected_seed_layer, name
        assert row["checked"].startswith("batch 0: chained blocks")
    assert rows["reference"]["layer_edges"] == rows["emulator"]["layer_edges"], "the same kernels and RNG keys pick the same edges"
    assert rows["emulator"]["checked"].endswith("equal to the reference backend")
    assert rows["dgl-cpu"]["x_dgl_cpu"] == 1.0 and rows["emulator"]["what"].endswith("NOT a GPU figure")
    assert "| emulator |" in r.stdout and "NOT a GPU figure" in r.stdout


def test_the_dgl_calls_it_makes_exist(graph):
    """DGL's side of the comparison: a graph made from the CSC (``("csc", ...)``, positions as edge
    ids), ``NeighborSampler(replace=).sample_blocks`` and ``block.edges(order="eid")``, on this DGL."""
    pytest.importorskip("dgl")
    indptr, indices, _ = graph
    method = sampling.Method("dgl-cpu", indptr, indices, FANOUTS, replace=False)
    seeds = torch.arange(0, 400, 11)
    sampling.check_batch(indptr, indices, seeds, method.sample(seeds), FANOUTS, replace=False)
    method.close()


def test_the_snapshot_method_runs_checks_and_times_its_build_and_refresh(tmp_path, monkeypatch):
    """snapshot-reference (gpu-snapshot's CPU twin): checked (the contract, each edge in its
    destination's snapshot), timed per batch, its build and one refresh timed apart; --replace
    skips it; gpu-snapshot is a GPU row, skipped without CUDA; the ratio line needs both GPU rows."""
    monkeypatch.setenv("DGL_ZEROCOPY_CACHE", str(tmp_path / "cache"))
    stem = tmp_path / "s"
    args = ["--num-nodes", "400", "--batch-size", "16", "--batches", "2", "--repeats", "2", "--warmup", "1", "--fanouts", "4,3"]
    code = sampling.main([*args, "--methods", "snapshot-reference,gpu-snapshot", "--out", str(stem)])
    rows = {r["method"]: r for r in json.loads(stem.with_suffix(".json").read_text())["rows"]}
    row = rows["snapshot-reference"]
    assert code == 0 and row["status"] == "ok", row
    assert row["checked"].endswith("each edge in its destination's snapshot") and row["what"].endswith("NOT a GPU figure")
    assert row["build_s"] > 0 and row["refresh_ms"] > 0 and row["ms_per_batch_median"] > 0
    if not CUDA:
        assert rows["gpu-snapshot"]["status"].startswith("skipped: no CUDA GPU")
    assert sampling.unavailable("snapshot-reference", replace=True) == "skipped: the snapshot samples without replacement (--replace)"
    ok = {"status": "ok", "build_s": 1.5, "refresh_ms": 20.0}
    assert (
        sampling.snapshot_ratio([{**ok, "method": "gpu-pinned", "ms_per_batch_median": 6.0}, {**ok, "method": "gpu-snapshot", "ms_per_batch_median": 1.5}])
        == 4.0
    )
    assert sampling.snapshot_ratio([row]) is None
    assert "4.00x faster per batch than UVA sampling of the full CSC (the goal: at least 3x)" in sampling.snapshot_line(4.0, ok)


def test_the_snapshot_check_catches_an_edge_outside_the_snapshot(graph):
    from dgl_zerocopy.sampling import GpuSnapshotSampler

    indptr, indices, _ = graph
    seeds = torch.arange(0, 400, 7)
    with SamplingGraph(indptr, indices) as full, GpuSnapshotSampler(FANOUTS, snapshot_size=4, device="reference") as snap:
        sampled = snap.sample_blocks(full, seeds)
        sampling.check_batch(indptr, indices, seeds, sampled, FANOUTS, replace=False)
        sampling.check_in_snapshot(snap, sampled)
        outside = _sample(graph, seeds, seed=3)  # the full CSC's picks: some edges outside the snapshot (4 of 8 per node)
        with pytest.raises(sampling.CheckError, match="not in its destination's snapshot"):
            sampling.check_in_snapshot(snap, outside)

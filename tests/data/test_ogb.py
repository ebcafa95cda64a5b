"""OGB loading through ogb's real code path, on tiny datasets written here in OGB's raw format.

ogb accepts a ``meta_dict`` (its ``master.csv`` column with ``dir_path``) for a dataset kept
outside its download folder; the tests write CSV datasets (as ogbn-arxiv/products) and a binary
one (as ogbn-papers100M, with NaN labels) and check what :func:`load_ogb` makes of them.
"""

import builtins
import gzip
import os

import numpy as np
import pandas as pd
import pytest
import torch
from script_runs import run_cli

from dgl_zerocopy.data import DatasetError, load_dataset
from dgl_zerocopy.data import ogb as ogb_data
from dgl_zerocopy.data.ogb import bidirected_csc, load_ogb
from dgl_zerocopy.training.config import build_config

# DGL is the reference for the graphs and samples the training runs; the GPU image has none.
dgl = pytest.importorskip("dgl")

NUM_NODES, FEAT_DIM, NUM_CLASSES = 60, 5, 3


def _master(name: str) -> dict:
    """ogb's own meta information for ``name`` (its master.csv column)."""
    import ogb.nodeproppred

    path = os.path.join(os.path.dirname(ogb.nodeproppred.__file__), "master.csv")
    return dict(pd.read_csv(path, index_col=0, keep_default_na=False)[name])


def _csv_gz(path, rows) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt") as f:
        for row in rows:
            f.write(",".join(str(v) for v in np.atleast_1d(row)) + "\n")


def _raw_data(seed: int = 0, unlabelled: bool = False) -> dict:
    """A small graph with duplicate edges, a reciprocal pair and a self-loop, exact-in-text features."""
    rng = np.random.default_rng(seed)
    src = rng.integers(0, NUM_NODES, 200)
    dst = rng.integers(0, NUM_NODES, 200)
    src = np.concatenate([src, [3, 4, 7, 3]])  # 3->4 and 4->3 (reciprocal), 7->7 (self-loop), 3->4 again
    dst = np.concatenate([dst, [4, 3, 7, 4]])
    feats = (rng.integers(-16, 16, (NUM_NODES, FEAT_DIM)) / 4).astype(np.float32)  # exact in decimal text
    labels = rng.integers(0, NUM_CLASSES, NUM_NODES).astype(np.float64)
    perm = rng.permutation(NUM_NODES)
    split = {"train": perm[:30], "valid": perm[30:40], "test": perm[40:50]}  # unsorted, as ogb's files may be
    if unlabelled:
        labels[perm[50:]] = np.nan  # nodes in no split carry no label (papers100M)
    return {"src": src, "dst": dst, "feat": feats, "label": labels, "split": split}


def write_ogb(folder, name: str, data: dict) -> dict:
    """Write ``data`` in OGB's raw layout under ``folder``; return ogb's meta_dict for it."""
    meta = _master(name)
    meta.update({"dir_path": str(folder), "num classes": str(NUM_CLASSES)})
    (folder / "raw").mkdir(parents=True)
    (folder / f"RELEASE_v{meta['version']}.txt").write_text("tiny test dataset\n")
    year = np.full((NUM_NODES, 1), 2020)
    if meta["binary"] == "True":
        np.savez_compressed(
            folder / "raw" / "data.npz",
            edge_index=np.stack([data["src"], data["dst"]]),
            node_feat=data["feat"],
            node_year=year,
            num_nodes_list=np.array([NUM_NODES]),
            num_edges_list=np.array([len(data["src"])]),
        )
        np.savez_compressed(folder / "raw" / "node-label.npz", node_label=data["label"][:, None].astype(np.float32))
    else:
        raw = folder / "raw"
        _csv_gz(raw / "edge.csv.gz", zip(data["src"], data["dst"]))
        _csv_gz(raw / "node-feat.csv.gz", data["feat"])
        _csv_gz(raw / "node-label.csv.gz", data["label"].astype(np.int64))
        _csv_gz(raw / "num-node-list.csv.gz", [NUM_NODES])
        _csv_gz(raw / "num-edge-list.csv.gz", [len(data["src"])])
        if meta["additional node files"] != "None":
            _csv_gz(raw / "node_year.csv.gz", year)
    for key, ids in data["split"].items():
        _csv_gz(folder / "split" / meta["split"] / f"{key}.csv.gz", ids)
    return meta


def _edge_pairs(indptr, indices) -> list:
    dst = np.repeat(np.arange(len(indptr) - 1), np.diff(indptr))
    return sorted(zip(dst.tolist(), np.asarray(indices).tolist()))


@pytest.fixture
def no_prompt(monkeypatch):
    def fail(*args):
        raise AssertionError(f"input() was called: {args}")

    monkeypatch.setattr(builtins, "input", fail)


CASES = {"ogbn-arxiv": False, "ogbn-products": False, "ogbn-papers100M": True}  # name -> has unlabelled nodes


@pytest.mark.parametrize("name", list(CASES))
def test_first_load_equals_the_written_files(tmp_path, name, no_prompt):
    data = _raw_data(unlabelled=CASES[name])
    meta = write_ogb(tmp_path / "ds", name, data)
    ds = load_ogb(name, tmp_path, meta_dict=meta)

    assert ds.name == name and ds.evaluator == name and ds.num_classes == NUM_CLASSES
    assert ds.features.dtype == np.float32 and ds.features.flags.c_contiguous
    np.testing.assert_array_equal(ds.features, data["feat"])
    expected_labels = np.where(np.isnan(data["label"]), -1, np.nan_to_num(data["label"])).astype(np.int64)
    assert ds.labels.dtype == np.int64
    np.testing.assert_array_equal(ds.labels, expected_labels)
    assert (ds.labels == -1).any() == CASES[name]
    for ours, key in (("train_idx", "train"), ("val_idx", "valid"), ("test_idx", "test")):
        got = getattr(ds, ours)
        assert got.dtype == np.int64
        np.testing.assert_array_equal(got, np.sort(data["split"][key]))

    assert ds.indptr.dtype == np.int64 and ds.indices.dtype == np.int64 and len(ds.indptr) == NUM_NODES + 1
    src, dst = data["src"], data["dst"]
    if name == "ogbn-products":  # ogb adds the inverse of every stored edge; duplicates stay
        expected = sorted(zip(np.concatenate([dst, src]).tolist(), np.concatenate([src, dst]).tolist()))
    else:  # bidirected as dgl.to_bidirected: each direction once, the self-loop once
        ref = dgl.to_bidirected(dgl.graph((torch.from_numpy(src), torch.from_numpy(dst)), num_nodes=NUM_NODES))
        rs, rd = ref.edges()
        expected = sorted(zip(rd.tolist(), rs.tolist()))
        assert (7, 7) in expected and expected.count((4, 3)) == 1
    assert _edge_pairs(ds.indptr, ds.indices) == expected
    for v in range(NUM_NODES):  # sources sorted within each column
        col = ds.indices[ds.indptr[v] : ds.indptr[v + 1]]
        assert np.all(np.diff(col) >= 0)


def test_symmetric_csc_equals_dgl_to_bidirected():
    rng = np.random.default_rng(1)
    n = 40
    src, dst = rng.integers(0, n, 300), rng.integers(0, n, 300)
    indptr, indices = bidirected_csc(src, dst, n)
    ref = dgl.to_bidirected(dgl.graph((torch.from_numpy(src), torch.from_numpy(dst)), num_nodes=n))
    rs, rd = ref.edges()
    assert _edge_pairs(indptr, indices) == sorted(zip(rd.tolist(), rs.tolist()))
    empty_ptr, empty_idx = bidirected_csc(np.array([], dtype=np.int64), np.array([], dtype=np.int64), 3)
    np.testing.assert_array_equal(empty_ptr, [0, 0, 0, 0])
    assert len(empty_idx) == 0


def test_second_load_maps_the_cache_without_ogb(tmp_path, monkeypatch, no_prompt):
    meta = write_ogb(tmp_path / "ds", "ogbn-arxiv", _raw_data())
    first = load_ogb("ogbn-arxiv", tmp_path, meta_dict=meta)
    assert (tmp_path / "ds" / "dgl_zerocopy" / "features.npy").is_file()

    from ogb.nodeproppred import dataset_dgl

    def refuse(*args, **kwargs):
        raise AssertionError("the second load must not read the dataset through ogb")

    monkeypatch.setattr(dataset_dgl, "DglNodePropPredDataset", refuse)
    second = load_ogb("ogbn-arxiv", tmp_path, meta_dict=meta)
    for key in ("indptr", "indices", "features", "labels", "train_idx", "val_idx", "test_idx"):
        got = getattr(second, key)
        assert isinstance(got, np.memmap), key
        assert not got.flags.writeable, key
        np.testing.assert_array_equal(got, getattr(first, key))
    assert second.num_classes == first.num_classes and second.evaluator == "ogbn-arxiv"


def test_cache_is_written_atomically(tmp_path, monkeypatch, no_prompt):
    meta = write_ogb(tmp_path / "ds", "ogbn-arxiv", _raw_data())

    def crash(*args):  # after labels, splits and features were written into the temporary folder
        raise RuntimeError("disk full (simulated)")

    monkeypatch.setattr(ogb_data, "bidirected_csc", crash)
    with pytest.raises(RuntimeError, match="simulated"):
        load_ogb("ogbn-arxiv", tmp_path, meta_dict=meta)
    leftovers = [p.name for p in (tmp_path / "ds").iterdir() if "dgl_zerocopy" in p.name]
    assert leftovers == [], leftovers

    monkeypatch.undo()
    ds = load_ogb("ogbn-arxiv", tmp_path, meta_dict=meta)
    assert ds.num_nodes == NUM_NODES and isinstance(ds.features, np.memmap)


def test_missing_dataset_names_url_and_layout(tmp_path, no_prompt):
    with pytest.raises(DatasetError) as e:
        load_ogb("ogbn-arxiv", tmp_path)
    msg = str(e.value)
    assert "http://snap.stanford.edu/ogb/data/nodeproppred/arxiv.zip" in msg
    for part in ("ogbn_arxiv/", "RELEASE_v1.txt", "raw/edge.csv.gz", "raw/node_year.csv.gz", "split/time/{train,valid,test}.csv.gz"):
        assert part in msg, part
    assert "\n" not in msg

    with pytest.raises(DatasetError) as e:
        load_dataset("ogbn-papers100M", root=tmp_path)
    msg = str(e.value)
    assert "papers100M-bin.zip" in msg and "raw/data.npz" in msg and "rename papers100M-bin/ to ogbn_papers100M/" in msg


def test_folder_without_release_file_is_refused_not_prompted(tmp_path, no_prompt):
    # ogb itself would ask "Will you update the dataset now? (y/N)" on stdin here
    meta = write_ogb(tmp_path / "ds", "ogbn-products", _raw_data())
    (tmp_path / "ds" / "RELEASE_v1.txt").unlink()
    with pytest.raises(DatasetError, match="missing RELEASE_v1.txt"):
        load_ogb("ogbn-products", tmp_path, meta_dict=meta)
    (tmp_path / "ds" / "raw" / "edge.csv.gz").unlink()  # ogb would try to download (and ask for big ones)
    (tmp_path / "ds" / "RELEASE_v1.txt").write_text("v1\n")
    with pytest.raises(DatasetError, match=r"missing raw/edge\.csv\.gz.*products\.zip"):
        load_ogb("ogbn-products", tmp_path, meta_dict=meta)
    assert not (tmp_path / "ds" / "dgl_zerocopy").exists()


@pytest.mark.slow  # a process; in-process: test_missing_dataset_names_url_and_layout, test_real_graphs::test_cli_reports_missing_dataset_in_one_line
def test_cli_missing_dataset_exits_2_with_one_line(tmp_path):
    r = run_cli("train", "--dataset", "ogbn-arxiv", "--data-root", tmp_path, "--device", "cpu", "--no-progress")
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("dgl-zerocopy: error: ogbn-arxiv is not in") and "arxiv.zip" in lines[0]
    assert "Traceback" not in r.stderr


def test_training_accuracy_is_ogb_evaluators(tmp_path, monkeypatch, no_prompt):
    import dgl_zerocopy.training.train as train_mod

    meta = write_ogb(tmp_path / "ds", "ogbn-arxiv", _raw_data())
    ds = load_ogb("ogbn-arxiv", tmp_path, meta_dict=meta)
    models = []
    build = train_mod.build_model
    monkeypatch.setattr(train_mod, "build_model", lambda *a, **k: models.append(build(*a, **k)) or models[-1])
    cfg = build_config(
        {},
        {
            "dataset": "ogbn-arxiv",
            "fanouts": [-1, -1],
            "batch_size": 8,
            "eval_batch_size": 16,
            "hidden": 8,
            "epochs": 2,
            "device": "cpu",
            "feature_source": "cpu",
            "prefetch": 0,
        },
    )
    history = train_mod.train(cfg, ds, progress=False)
    assert len(history) == 2 and np.isfinite(history[-1].loss)

    # direct: full neighbourhoods of the test nodes through DGL's own sampler, then argmax == label
    model = models[0].eval()
    graph = ds.to_dgl()
    test_idx = torch.from_numpy(np.array(ds.test_idx))
    input_nodes, _, blocks = dgl.dataloading.MultiLayerFullNeighborSampler(2).sample_blocks(graph, test_idx)
    with torch.no_grad():
        pred = model(blocks, torch.from_numpy(np.array(ds.features))[input_nodes]).argmax(1)
    direct = float((pred.numpy() == ds.labels[test_idx.numpy()]).mean())
    assert history[-1].test_acc == pytest.approx(direct, abs=1e-12)


@pytest.mark.slow
def test_cli_trains_on_ogbs_own_folder_layout(tmp_path):
    # no meta_dict: ogb's master.csv and its <root>/ogbn_arxiv folder, first load through the command
    write_ogb(tmp_path / "ogbn_arxiv", "ogbn-arxiv", _raw_data())
    args = ["--dataset", "ogbn-arxiv", "--data-root", tmp_path, "--device", "cpu", "--no-progress"]
    r = run_cli("train", *args, "--fanouts", "3,3", "--batch-size", "8", "--hidden", "8", "--epochs", "1")
    assert r.returncode == 0, r.stderr
    assert "ogbn-arxiv: 60 nodes" in r.stdout and "40 classes" in r.stdout  # ogb's class count for arxiv
    assert "final test accuracy" in r.stdout
    assert "caching it as .npy" in r.stderr and "%|" not in r.stderr  # logged; ogb's progress bars kept out
    ds = load_dataset("ogbn-arxiv", root=tmp_path)
    assert isinstance(ds.features, np.memmap) and ds.evaluator == "ogbn-arxiv"
    assert (tmp_path / "ogbn_arxiv" / "dgl_zerocopy" / "meta.json").is_file()


def test_ogbs_own_prompts_raise_instead_of_reading_stdin(tmp_path, monkeypatch, no_prompt):
    # with the file check switched off, ogb reaches its prompt ("update the dataset now?") and its
    # download decision: both must end in DatasetError, never in input()
    monkeypatch.setattr(ogb_data, "_check_files", lambda *args: None)
    meta = write_ogb(tmp_path / "ds", "ogbn-arxiv", _raw_data())
    (tmp_path / "ds" / "RELEASE_v1.txt").unlink()
    with pytest.raises(DatasetError, match=r"ogb wanted to ask or download \(Will you update the dataset now\? \(y/N\)\)"):
        load_ogb("ogbn-arxiv", tmp_path, meta_dict=meta)
    (tmp_path / "ds" / "RELEASE_v1.txt").write_text("v1\n")
    (tmp_path / "ds" / "raw" / "edge.csv.gz").unlink()
    with pytest.raises(DatasetError, match=r"ogb wanted to ask or download \(http://snap\.stanford\.edu/ogb/data/nodeproppred/arxiv\.zip\)"):
        load_ogb("ogbn-arxiv", tmp_path, meta_dict=meta)
    from ogb.nodeproppred import dataset_dgl

    assert "input" not in vars(dataset_dgl), "the guard is removed after use"
    assert not [p for p in (tmp_path / "ds").iterdir() if "dgl_zerocopy" in p.name]

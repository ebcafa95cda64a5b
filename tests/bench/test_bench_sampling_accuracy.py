"""bench/sampler/sampling_accuracy.py: its correctness check, its arguments, and a smoke run on Cora written to a
temporary folder (never bench/results/)."""

from __future__ import annotations

import sys

import pytest
import torch
from conftest import REPO, SHARED_DATA
from script_runs import run_bench

sys.path.insert(0, str(REPO / "bench" / "sampler"))


@pytest.mark.parametrize("idtype", [torch.int32, torch.int64])
def test_the_check_passes_on_the_emulators_blocks(idtype):
    """Emulator == reference for one batch, and its blocks are real in-edges, min(deg, fanout) each."""
    dgl = pytest.importorskip("dgl")
    pytest.importorskip("dgl_zerocopy.cuda.sampling.emulator")
    from sampling_accuracy import check_blocks

    gen = torch.Generator().manual_seed(0)
    g = dgl.graph((torch.randint(0, 300, (3000,), generator=gen), torch.randint(0, 300, (3000,), generator=gen)), num_nodes=300, idtype=idtype)
    check_blocks(g, [4, 3], torch.arange(40, dtype=idtype))
    check_blocks(g, [-1, 2], torch.tensor([5, 5, 7], dtype=idtype))  # every in-edge; duplicate seeds


@pytest.mark.parametrize("backend, message", [("emulator", "emulator and reference blocks differ"), (None, "an EID does not name its")])
def test_the_check_rejects_wrong_edge_ids(monkeypatch, backend, message):
    """Edge ids reversed in the first block: on one backend (the two disagree), or on both."""
    dgl = pytest.importorskip("dgl")
    pytest.importorskip("dgl_zerocopy.cuda.sampling.emulator")
    from sampling_accuracy import check_blocks

    import dgl_zerocopy.sampling as sampling_module

    class Wrong(sampling_module.GpuNeighborSampler):
        def sample(self, g, seeds, exclude_eids=None):
            input_nodes, output_nodes, blocks = super().sample(g, seeds)
            if backend in (None, self.backend):
                blocks[0].edata[dgl.EID] = blocks[0].edata[dgl.EID].flip(0)
            return input_nodes, output_nodes, blocks

    monkeypatch.setattr(sampling_module, "GpuNeighborSampler", Wrong)
    gen = torch.Generator().manual_seed(0)
    g = dgl.graph((torch.randint(0, 300, (3000,), generator=gen), torch.randint(0, 300, (3000,), generator=gen)), num_nodes=300)
    with pytest.raises(AssertionError, match=message):
        check_blocks(g, [4, 3], torch.arange(40))


def test_dgl_is_always_run_and_samplers_keep_one_order():
    from sampling_accuracy import parse_args

    assert parse_args(["--samplers", "reference,emulator"]).sampler_list == ["emulator", "reference", "dgl"]


@pytest.mark.slow  # two short trainings per seed on Cora, in a subprocess
def test_sampling_accuracy_bench_smoke(tmp_path):
    pytest.importorskip("dgl")
    pytest.importorskip("dgl_zerocopy.cuda.sampling.emulator")
    if not SHARED_DATA.is_dir():
        pytest.skip(f"real datasets not present at {SHARED_DATA}")
    out = tmp_path / "sa"
    args = ["--datasets", "cora", "--seeds", "2", "--epochs", "2", "--eval-every", "1", "--hidden", "8", "--samplers", "emulator,reference"]
    r, result = run_bench("bench/sampler/sampling_accuracy.py", *args, "--data-root", SHARED_DATA, out=out)
    rows = result["rows"]
    assert [row["sampler"] for row in rows] == ["emulator", "reference", "dgl"]
    assert all(0 <= row["test_acc_mean"] <= 1 and row["seeds"] == 2 for row in rows)
    assert rows[0]["test_accs"] == rows[1]["test_accs"], "the emulator and the reference pick the same edges, so train the same model"
    assert "bench/sampler/sampling_accuracy.py --datasets cora" in result["meta"]["command"]
    assert out.with_suffix(".csv").read_text().startswith("# command: ") and out.with_suffix(".png").stat().st_size > 0
    assert "| Cora | emulator |" in r.stdout and "emulator == reference and blocks checked" in r.stdout

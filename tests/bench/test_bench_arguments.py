"""Every benchmark refuses a bad argument as argparse does: exit status 2 and one line naming the value and what it
may be, before anything runs."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest
from conftest import REPO

from dgl_zerocopy.cli import BENCHMARKS

# One refusal a line: the script under bench/ | its arguments | what its error line says.
REFUSALS = [
    line.split(" | ")
    for line in """
training/pyg_accuracy.py | --datasets cora,ogbn-magic | unknown dataset 'ogbn-magic'
training/pyg_accuracy.py | --routes dgl,jax | unknown route 'jax'
training/pyg_accuracy.py | --seeds 0 | --seeds must be at least 1
sampler/sampling_accuracy.py | --datasets cora,ogbn-magic | unknown dataset 'ogbn-magic'
sampler/sampling_accuracy.py | --samplers emulator,gpu | unknown sampler 'gpu'
sampler/sampling_accuracy.py | --seeds 1 | --seeds must be at least 2
training/pyg_epoch.py | --routes pyg,dgl-own | unknown route 'dgl-own'; choose from pyg, dgl-route, dgl, pyg-own
training/pyg_epoch.py | --fanouts 15,0 | --fanouts must be comma-separated ints >= 1
training/pyg_epoch.py | --prefetch 0,-1 | --prefetch must be comma-separated ints >= 0
training/pyg_epoch.py | --epochs 0 | --epochs must be at least 1, but got 0
training/pyg_epoch.py | --max-batches -1 | --max-batches must be 0 or more
sampler/sampling.py | --fanouts 15,x | --fanouts must be comma-separated ints >= 1 (or -1: every in-edge)
sampler/sampling.py | --fanouts 15,0 | --fanouts must be
sampler/sampling.py | --methods gpu,dgl-cpu | unknown method 'gpu'; choose from gpu-pinned, gpu-device, gpu-snapshot, dgl-cpu, reference, emulator, snapshot-reference, pyg-cpu, hops-cpu, hops-numpy
sampler/sampling.py | --batches 0 | --batches must be at least 1, but got 0
""".strip().splitlines()
]


def bench_module(script: str):
    """Import bench/SCRIPT as its folder's own scripts do: the folder first on ``sys.path``."""
    folder = str(REPO / "bench" / Path(script).parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    return importlib.import_module(Path(script).stem)


@pytest.mark.parametrize("script, arguments, said", REFUSALS)
def test_a_bad_argument_is_a_one_line_error(script, arguments, said, capsys):
    with pytest.raises(SystemExit) as exited:
        bench_module(script).parse_args(arguments.split())
    assert exited.value.code == 2 and said in capsys.readouterr().err


@pytest.mark.parametrize("script", sorted({script for script, _, _ in REFUSALS}))
def test_each_script_is_a_listed_benchmark(script):
    assert BENCHMARKS[Path(script).stem] == script

"""``dgl-zerocopy info`` says whether GPU sampling is available: a CUDA GPU, CuPy, and NVRTC compiling
the sampling kernels. Without a GPU the CUDA branch runs with a stand-in capability."""

import sys

import pytest
import torch
from conftest import CUDA

from dgl_zerocopy.cuda import nvrtc
from dgl_zerocopy.cuda.sampling import launcher
from dgl_zerocopy.training import info


@pytest.mark.skipif(CUDA, reason="checks the machine without a GPU")
def test_without_cuda_gpu_sampling_is_not_available_and_the_emulator_is_named():
    line = info._gpu_sampling(torch.cuda.is_available())
    assert line == "not available: no CUDA GPU (torch.cuda.is_available() is False); device='emulator' runs the same kernels on the CPU"
    report = dict(tuple(p.strip() for p in ln.split(" : ", 1)) for ln in info.environment_report().splitlines())
    assert report["GPU sampling"] == line


def test_with_cuda_it_compiles_one_sampling_kernel_for_the_gpus_architecture(monkeypatch):
    try:
        nvrtc.find_nvrtc()
    except OSError as e:
        pytest.skip(f"no NVRTC here: {e}")
    pytest.importorskip("cupy")
    calls = []

    def recorded(arch, names=None):
        calls.append((arch, tuple(names)))
        return launcher_compile(arch, names)

    launcher_compile = launcher.compile_check
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    monkeypatch.setattr(launcher, "compile_check", recorded)
    line = info._gpu_sampling(True)
    assert line == "available (CUDA, CuPy, NVRTC compiles kernels/sample.cu for sm_90): GpuNeighborSampler(device='cuda')"
    assert calls == [("sm_90", ("sample_count",))]


def test_each_missing_piece_is_named(monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (8, 0))

    def fails(arch, names=None):
        raise nvrtc.KernelCompileError("sample.cu(1): error: boom\nmore")

    monkeypatch.setattr(launcher, "compile_check", fails)
    monkeypatch.setitem(sys.modules, "cupy", pytest.importorskip("cupy"))
    assert info._gpu_sampling(True) == "not available: NVRTC cannot compile the sampling kernels for sm_80 (KernelCompileError: sample.cu(1): error: boom)"
    monkeypatch.setitem(sys.modules, "cupy", None)  # import cupy raises ImportError
    assert info._gpu_sampling(True).startswith("not available: CuPy is not usable (ModuleNotFoundError); pip install dgl-zerocopy[cuda12]")

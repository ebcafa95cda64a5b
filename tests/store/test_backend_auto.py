"""``backend="auto"`` picks ``zerocopy`` only where a gather kernel compiles for the device, else
``cpu`` with a warning that says why and how to fix it. CUDA, CuPy and the compile are faked, so
this runs on the CPU."""

from __future__ import annotations

import sys
import types
import warnings

import pytest
import torch

from dgl_zerocopy.cuda import nvrtc
from dgl_zerocopy.cuda.gather import instantiations, launcher
from dgl_zerocopy.store import backends
from dgl_zerocopy.store.devices import resolve_backend


class FakeCompile:
    """Stands in for ``compile_gather_module``: records the calls, raises ``error`` if given."""

    def __init__(self, error: Exception | None = None) -> None:
        self.error = error
        self.calls: list[tuple] = []

    def __call__(self, device_id: int, names: tuple[str, ...]) -> object:
        self.calls.append((device_id, names))
        if self.error is not None:
            raise self.error
        return object()


@pytest.fixture
def fake_gpu(monkeypatch):
    """Two CUDA devices of compute capability 9.0 and 8.0, CuPy importable, a checking cache
    emptied before and after."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda index=None: [(9, 0), (8, 0)][index or 0])
    monkeypatch.setitem(sys.modules, "cupy", types.ModuleType("cupy"))
    backends.zerocopy_problem.cache_clear()
    yield monkeypatch
    backends.zerocopy_problem.cache_clear()


def _resolve(*args) -> tuple[str, list[warnings.WarningMessage]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        backend = resolve_backend(*args)
    return backend, list(caught)


def test_kernel_compiles_so_auto_is_zerocopy_checked_once_per_device(fake_gpu):
    compile_ = FakeCompile()
    fake_gpu.setattr(launcher, "compile_gather_module", compile_)
    assert _resolve("auto") == ("zerocopy", [])
    assert _resolve("auto", "cuda") == ("zerocopy", [])
    assert compile_.calls == [(0, (backends.PROBE_KERNEL,))]
    assert backends.PROBE_KERNEL in instantiations.all_name_expressions()
    assert _resolve("auto", "cuda:1") == ("zerocopy", [])
    assert compile_.calls[1:] == [(1, (backends.PROBE_KERNEL,))]
    assert backends.zerocopy_available() and backends.zerocopy_available(1)


def test_compile_failure_falls_back_to_cpu_with_the_reason_and_the_fix(fake_gpu):
    error = nvrtc.KernelCompileError("NVRTC could not compile gather.cu for sm_90 (NVRTC_ERROR_INVALID_OPTION):\nline two of the log")
    fake_gpu.setattr(launcher, "compile_gather_module", FakeCompile(error))
    backend, caught = _resolve("auto")
    assert backend == "cpu"
    assert len(caught) == 1 and caught[0].category is RuntimeWarning
    message = str(caught[0].message)
    for part in (
        "backend='auto' uses 'cpu'",
        "CUDA device 0 (sm_90)",
        "KernelCompileError",
        "NVRTC could not compile gather.cu for sm_90 (NVRTC_ERROR_INVALID_OPTION):",
        "pip install dgl-zerocopy[cuda",
        "CUDA_PATH",
        "dgl-zerocopy info",
    ):
        assert part in message, part
    assert "line two" not in message
    assert not backends.zerocopy_available()


def test_failure_on_one_device_only(fake_gpu):
    def compile_(device_id, names):
        if device_id == 1:
            raise RuntimeError("CuPy failed to load libnvrtc.so.12: OSError: cannot open shared object file")
        return object()

    fake_gpu.setattr(launcher, "compile_gather_module", compile_)
    assert _resolve("auto", "cuda:0") == ("zerocopy", [])
    backend, caught = _resolve("auto", "cuda:1")
    assert backend == "cpu" and "(sm_80): RuntimeError: CuPy failed to load libnvrtc.so.12" in str(caught[0].message)


def test_cupy_missing_falls_back_to_cpu_and_says_what_to_install(fake_gpu):
    fake_gpu.setitem(sys.modules, "cupy", None)  # import cupy raises ImportError
    fake_gpu.setattr(launcher, "compile_gather_module", FakeCompile(AssertionError("not reached")))
    backend, caught = _resolve("auto")
    assert backend == "cpu"
    message = str(caught[0].message)
    assert "CuPy does not import" in message and "pip install dgl-zerocopy[cuda" in message, message


def test_cpu_device_or_no_cuda_is_cpu_without_a_warning_or_a_compile(fake_gpu):
    compile_ = FakeCompile()
    fake_gpu.setattr(launcher, "compile_gather_module", compile_)
    assert _resolve("auto", "cpu") == ("cpu", [])
    assert _resolve("auto", torch.device("cpu")) == ("cpu", [])
    fake_gpu.setattr(torch.cuda, "is_available", lambda: False)
    assert _resolve("auto") == ("cpu", [])
    assert not backends.zerocopy_available()
    assert compile_.calls == []


def test_explicit_backends_are_not_checked(fake_gpu):
    fake_gpu.setattr(launcher, "compile_gather_module", FakeCompile(AssertionError("not reached")))
    for name in ("zerocopy", "cpu", "gpu"):
        assert _resolve(name) == (name, [])

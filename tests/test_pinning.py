"""Pinning and stream glue against a stand-in CUDA runtime: runs on the CPU.

The stand-in has the names of the real ``cupy.cuda.runtime`` (checked below), so a call to a name
CuPy lacks fails here too, and the failure paths (registration refused, pointer query failing)
can be shown without a GPU: nothing may stay registered after a failure.
"""
from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

cupy = pytest.importorskip("cupy", reason="needs CuPy (pip package cupy-cuda12x), importable without a GPU")

from dgl_zerocopy import pinning  # noqa: E402
from dgl_zerocopy.cuda_gather import cupy_stream  # noqa: E402
from dgl_zerocopy.store import _pinnable  # noqa: E402


class _Error(Exception):
    pass


class FakeRuntime:
    """Records calls; the names are those of ``cupy.cuda.runtime`` that pinning uses."""

    CUDARuntimeError = _Error
    cudaDevAttrHostRegisterReadOnlySupported = 113

    def __init__(self, register_error: str | None = None, pointer_error: bool = False, read_only_supported: int = 1) -> None:
        self.registered: dict[int, tuple[int, int]] = {}
        self.calls: list[str] = []
        self._register_error, self._pointer_error, self._read_only = register_error, pointer_error, read_only_supported

    def hostRegister(self, ptr: int, size: int, flags: int) -> None:
        self.calls.append("hostRegister")
        if self._register_error:
            raise _Error(self._register_error)
        if ptr in self.registered:
            raise _Error("cudaErrorHostMemoryAlreadyRegistered")
        self.registered[ptr] = (size, flags)

    def hostUnregister(self, ptr: int) -> None:
        self.calls.append("hostUnregister")
        del self.registered[ptr]

    def pointerGetAttributes(self, ptr: int):
        self.calls.append("pointerGetAttributes")
        if self._pointer_error:
            raise _Error("cudaErrorInvalidValue")
        attributes = type("PointerAttributes", (), {})()
        attributes.devicePointer = ptr + 0x1000  # not the host address: the code must use this one
        return attributes

    def deviceGetAttribute(self, attribute: int, device: int) -> int:
        self.calls.append("deviceGetAttribute")
        assert attribute == 113
        return self._read_only


@pytest.fixture
def runtime(monkeypatch):
    fake = FakeRuntime()
    monkeypatch.setattr(pinning, "_runtime", lambda: fake)
    return fake


def test_the_stand_in_has_only_names_the_real_runtime_has():
    real = cupy.cuda.runtime
    for name in [n for n in vars(FakeRuntime) if not n.startswith("_")] + ["CUDARuntimeError"]:
        assert hasattr(real, name), f"cupy.cuda.runtime has no {name}: the stand-in would hide a bug"
    assert hasattr(real.PointerAttributes, "devicePointer")
    assert real.cudaDevAttrHostRegisterReadOnlySupported == FakeRuntime.cudaDevAttrHostRegisterReadOnlySupported


def test_pin_takes_the_device_pointer_from_the_pointer_attributes(runtime):
    pinned = pinning.PinnedRange(0x10000, 4096)
    assert pinned.pinned and pinned.device_ptr == 0x11000
    assert runtime.registered == {0x10000: (4096, 0x01 | 0x02)}
    pinned.unpin()
    pinned.unpin()  # idempotent
    assert runtime.registered == {} and runtime.calls.count("hostUnregister") == 1


def test_read_only_flag_only_when_asked(runtime):
    pinning.PinnedRange(0x20000, 64, read_only=True)
    assert runtime.registered[0x20000][1] & 0x08


def test_a_failure_after_registration_leaves_nothing_registered(monkeypatch):
    fake = FakeRuntime(pointer_error=True)
    monkeypatch.setattr(pinning, "_runtime", lambda: fake)
    with pytest.raises(_Error):
        pinning.PinnedRange(0x30000, 64)
    assert fake.registered == {}
    assert fake.calls == ["hostRegister", "pointerGetAttributes", "hostUnregister"]


def test_a_refused_registration_says_why_and_leaves_nothing(monkeypatch):
    fake = FakeRuntime(register_error="cudaErrorHostMemoryAlreadyRegistered: already registered")
    monkeypatch.setattr(pinning, "_runtime", lambda: fake)
    with pytest.raises(RuntimeError, match="already pinned.*close that store"):
        pinning.PinnedRange(0x40000, 64)
    assert fake.registered == {} and "hostUnregister" not in fake.calls


def test_empty_range_registers_nothing(runtime):
    assert pinning.PinnedRange(0x50000, 0).device_ptr == 0x50000 and runtime.calls == []


def test_read_only_support_is_asked_of_the_device(monkeypatch):
    for answer in (0, 1):
        fake = FakeRuntime(read_only_supported=answer)
        monkeypatch.setattr(pinning, "_runtime", lambda: fake)
        assert pinning.read_only_register_supported(0) is bool(answer)


def _mapped(tmp_path, mode="r"):
    data = np.arange(120, dtype=np.float32).reshape(40, 3)
    np.save(tmp_path / "f.npy", data)
    return data, np.load(tmp_path / "f.npy", mmap_mode=mode)


def test_read_only_map_is_pinned_read_only_where_supported(tmp_path):
    _, array = _mapped(tmp_path)
    table = _view(array)
    got, read_only = _pinnable(table, array, read_only_supported=True)
    assert got is table and read_only


def test_read_only_map_becomes_a_private_writable_map_where_unsupported(tmp_path):
    data, array = _mapped(tmp_path)
    with pytest.warns(UserWarning, match="cudaDevAttrHostRegisterReadOnlySupported is 0.*copy-on-write"):
        table, read_only = _pinnable(_view(array), array, read_only_supported=False)
    assert not read_only
    torch.testing.assert_close(table, torch.from_numpy(data))
    assert table.numpy().flags.writeable
    table[0, 0] = -1.0  # the pages are private: the file keeps its contents
    assert np.load(tmp_path / "f.npy")[0, 0] == 0.0


def test_flag_only_read_only_array_is_pinned_as_it_is(tmp_path):
    data = np.arange(12, dtype=np.float32).reshape(4, 3)
    data.setflags(write=False)
    table = _view(data)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got, read_only = _pinnable(table, data, read_only_supported=False)
    assert got is table and not read_only


def _view(array):
    from dgl_zerocopy.data.base import tensor_view

    return tensor_view(array)


def test_torch_streams_become_cupy_streams_without_copying():
    class TorchLikeStream:
        cuda_stream = 0x7F00

    wrapped = cupy_stream(cupy, TorchLikeStream(), 0)
    assert wrapped.ptr == 0x7F00
    assert cupy_stream(cupy, wrapped, 0) is wrapped
    with pytest.raises(TypeError, match="torch.cuda.Stream"):
        cupy_stream(cupy, "stream", 0)


def test_from_external_is_preferred_where_cupy_has_it(monkeypatch):
    seen = []

    def from_external(obj):
        seen.append(obj.__cuda_stream__())
        return cupy.cuda.ExternalStream(obj.__cuda_stream__()[1], 0)

    class TorchLikeStream:
        cuda_stream = 0x7F10

    monkeypatch.setattr(cupy.cuda.Stream, "from_external", from_external, raising=False)
    assert cupy_stream(cupy, TorchLikeStream(), 0).ptr == 0x7F10
    assert seen == [(0, 0x7F10)]

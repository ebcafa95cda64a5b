"""Pinning and stream glue against a stand-in CUDA runtime: runs on the CPU.

The stand-in has the names of the real ``cupy.cuda.runtime`` (checked below), so a call to a name
CuPy lacks fails here too, and the failure paths (registration refused, pointer query failing)
can be shown without a GPU: nothing may stay registered after a failure.
"""

from __future__ import annotations

import ctypes
import os
import resource
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

cupy = pytest.importorskip("cupy", reason="needs CuPy (pip package cupy-cuda12x), importable without a GPU")

from dgl_zerocopy.cuda.gather.launcher import cupy_stream  # noqa: E402
from dgl_zerocopy.store import pin_target, pinning  # noqa: E402
from dgl_zerocopy.store.table_input import as_table  # noqa: E402


class _Error(Exception):
    pass


class FakeRuntime:
    """Records calls; the names are those of ``cupy.cuda.runtime`` that pinning uses.

    Like the real runtime, it reports memory it registered, and memory page-locked by others
    (``page_locked``: ranges as from ``cudaHostAlloc`` or ``tensor.pin_memory()``), as
    ``memoryTypeHost``, anything else as unregistered (0), and refuses to register a range that
    overlaps page-locked memory."""

    CUDARuntimeError = _Error
    cudaDevAttrHostRegisterReadOnlySupported = 113
    memoryTypeHost = 1

    def __init__(
        self,
        register_error: str | None = None,
        pointer_error: bool = False,
        read_only_supported: int = 1,
        page_locked: tuple[tuple[int, int], ...] = (),
        touch_pages: bool = False,
    ) -> None:
        self.touch_pages = touch_pages  # do to real pages what a writable registration does (see _write_fault_every_page)
        self.registered: dict[int, tuple[int, int]] = {}
        self.page_locked = list(page_locked)  # (start, bytes) pinned by someone else
        self.calls: list[str] = []
        self._register_error, self._pointer_error, self._read_only = register_error, pointer_error, read_only_supported

    def _locked(self, start: int, size: int) -> bool:
        ranges = self.page_locked + [(ptr, entry[0]) for ptr, entry in self.registered.items()]
        return any(s < start + size and start < s + n for s, n in ranges)

    def hostRegister(self, ptr: int, size: int, flags: int) -> None:
        self.calls.append("hostRegister")
        if self._register_error:
            raise _Error(self._register_error)
        if self._locked(ptr, size):
            raise _Error("cudaErrorHostMemoryAlreadyRegistered: part of the range is already page-locked")
        if self.touch_pages and not flags & 0x08:
            _write_fault_every_page(ptr, size)
        self.registered[ptr] = (size, flags)

    def hostUnregister(self, ptr: int) -> None:
        self.calls.append("hostUnregister")
        del self.registered[ptr]

    def pointerGetAttributes(self, ptr: int):
        self.calls.append("pointerGetAttributes")
        if self._pointer_error:
            raise _Error("cudaErrorInvalidValue")
        attributes = type("PointerAttributes", (), {})()
        attributes.type = self.memoryTypeHost if self._locked(ptr, 1) else 0
        attributes.devicePointer = ptr + 0x1000 if attributes.type else 0  # not the host address: the code must use this one
        return attributes

    def deviceGetAttribute(self, attribute: int, device: int) -> int:
        self.calls.append("deviceGetAttribute")
        assert attribute == 113
        return self._read_only


def use(monkeypatch, fake: FakeRuntime) -> FakeRuntime:
    """Make ``fake`` the runtime of dgl_zerocopy.store.pinning, with a fresh record of this process's registrations."""
    monkeypatch.setattr(pinning, "_runtime", lambda: fake)
    monkeypatch.setattr(pinning, "_registered", {})
    return fake


def _write_fault_every_page(ptr: int, size: int) -> None:
    """What the driver does to real pages when it registers them writable: it faults each page in for
    writing (get_user_pages with FOLL_WRITE: a shared file page is then dirty and the file's
    modification time updated; a copy-on-write page becomes a private copy), and it refuses pages
    that cannot be written. Done here by writing each page's first byte back unchanged."""
    end = ptr + size
    covered = ptr
    for start, stop, perms, _ in _mappings():
        if start <= covered < stop:
            if "w" not in perms:
                raise _Error("cudaErrorInvalidValue: a writable registration of pages that cannot be written")
            covered = stop
            if covered >= end:
                break
    if covered < end:
        raise _Error("cudaErrorInvalidValue: part of the range is not mapped")
    for page in range(ptr - ptr % 4096, end, 4096):
        byte = ctypes.c_char.from_address(max(page, ptr))
        byte.value = byte.value


def _mappings() -> list[tuple[int, int, str, str]]:
    """This process's mappings from /proc/self/maps: (start, end, permissions, path), in address order."""
    rows = []
    for line in Path("/proc/self/maps").read_text().splitlines():
        fields = line.split(maxsplit=5)
        start, stop = (int(x, 16) for x in fields[0].split("-"))
        rows.append((start, stop, fields[1], fields[5] if len(fields) > 5 else ""))
    return rows


def mapping_of(address: int) -> tuple[str, str]:
    """(permissions, path) of the mapping that holds ``address``: ``rw-p`` is private, ``r--s`` shared."""
    for start, stop, perms, path in _mappings():
        if start <= address < stop:
            return perms, path
    raise LookupError(f"0x{address:x} is not mapped")


@pytest.fixture
def runtime(monkeypatch):
    return use(monkeypatch, FakeRuntime())


def test_the_stand_in_has_only_names_the_real_runtime_has():
    real = cupy.cuda.runtime
    for name in [n for n in vars(FakeRuntime) if not n.startswith("_")] + ["CUDARuntimeError"]:
        assert hasattr(real, name), f"cupy.cuda.runtime has no {name}: the stand-in would hide a bug"
    assert hasattr(real.PointerAttributes, "devicePointer") and hasattr(real.PointerAttributes, "type")
    assert real.cudaDevAttrHostRegisterReadOnlySupported == FakeRuntime.cudaDevAttrHostRegisterReadOnlySupported
    # cudaMemoryTypeHost is 1 and pageable memory is cudaMemoryTypeUnregistered, 0 (CUDA runtime API).
    assert real.memoryTypeHost == FakeRuntime.memoryTypeHost == 1 and real.memoryTypeUnregistered == 0


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
    fake = use(monkeypatch, FakeRuntime(pointer_error=True))
    with pytest.raises(_Error):
        pinning.PinnedRange(0x30000, 64)
    assert fake.registered == {} and pinning._registered == {}
    # The first two queries ask whether the range is page-locked already (an error there: it is not).
    assert fake.calls == ["pointerGetAttributes"] * 2 + ["hostRegister", "pointerGetAttributes", "hostUnregister"]


def test_a_refused_registration_says_why_and_leaves_nothing(monkeypatch):
    fake = use(monkeypatch, FakeRuntime(register_error="cudaErrorHostMemoryAlreadyRegistered: already registered"))
    with pytest.raises(RuntimeError, match="already pinned.*close that store"):
        pinning.PinnedRange(0x40000, 64)
    assert fake.registered == {} and "hostUnregister" not in fake.calls


def test_empty_range_registers_nothing(runtime):
    assert pinning.PinnedRange(0x50000, 0).device_ptr == 0x50000 and runtime.calls == []


def test_read_only_support_is_asked_of_the_device(monkeypatch):
    for answer in (0, 1):
        use(monkeypatch, FakeRuntime(read_only_supported=answer))
        assert pinning.read_only_register_supported(0) is bool(answer)


def _mapped(tmp_path, mode="r"):
    data = np.arange(120, dtype=np.float32).reshape(40, 3)
    np.save(tmp_path / "f.npy", data)
    return data, np.load(tmp_path / "f.npy", mmap_mode=mode)


def test_read_only_map_is_pinned_read_only_where_supported(tmp_path):
    _, array = _mapped(tmp_path)
    table = _view(array)
    got, read_only = pin_target.pinnable_table(table, array, read_only_supported=True)
    assert got is table and read_only


def test_read_only_map_becomes_a_private_writable_map_where_unsupported(tmp_path):
    data, array = _mapped(tmp_path)
    with pytest.warns(UserWarning, match="cudaDevAttrHostRegisterReadOnlySupported is 0.*copy-on-write"):
        table, read_only = pin_target.pinnable_table(_view(array), array, read_only_supported=False)
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
        got, read_only = pin_target.pinnable_table(table, data, read_only_supported=False)
    assert got is table and not read_only


# -- a range page-locked already ----------------------------------------------


def test_a_range_page_locked_already_is_used_as_it_is(monkeypatch):
    # As from tensor.pin_memory() or cudaHostAlloc: registering it again would fail.
    fake = use(monkeypatch, FakeRuntime(page_locked=((0x60000, 8192),)))
    pinned = pinning.PinnedRange(0x60000 + 512, 4096)
    assert pinned.borrowed and not pinned.pinned
    assert pinned.device_ptr == 0x60000 + 512 + 0x1000  # asked of the runtime, for the range's own first byte
    pinned.unpin()
    assert "hostRegister" not in fake.calls and "hostUnregister" not in fake.calls
    assert fake.page_locked == [(0x60000, 8192)] and fake.registered == {}


def test_a_range_another_store_pinned_is_refused_not_borrowed(runtime):
    # The first store unregisters its range on close: a second one over the same pages must not read them then.
    first = pinning.PinnedRange(0x70000, 4096)
    with pytest.raises(RuntimeError, match="already pinned by another FeatureStore.*close that store first"):
        pinning.PinnedRange(0x70000 + 1024, 1024)
    assert runtime.calls.count("hostRegister") == 1
    first.unpin()
    again = pinning.PinnedRange(0x70000, 4096)  # registrable again
    assert again.pinned and not again.borrowed
    again.unpin()


def test_a_range_only_partly_page_locked_is_refused(monkeypatch):
    fake = use(monkeypatch, FakeRuntime(page_locked=((0x80000, 4096),)))
    with pytest.raises(RuntimeError, match="only part of this host range .* is page-locked"):
        pinning.PinnedRange(0x80000 + 2048, 8192)
    assert fake.registered == {} and "hostRegister" not in fake.calls


# -- file maps are never written ---------------------------------------------


@pytest.mark.parametrize("supported", [1, 0], ids=["read-only-supported", "read-only-unsupported"])
@pytest.mark.parametrize("mode", ["r", "r+", "w+", "c"])
def test_pinning_a_file_map_leaves_the_file_as_it_was(tmp_path, monkeypatch, mode, supported):
    """The store's choice of mapping and flag, pinned by a stand-in that does to the pages what a
    writable registration does: the file's bytes and modification time must not change."""
    data = np.arange(3 * 4096, dtype=np.float32).reshape(1024, 12)  # 12 pages
    path = tmp_path / "f.npy"
    np.save(path, data)
    if mode == "w+":
        array = np.lib.format.open_memmap(path, mode="w+", dtype=data.dtype, shape=data.shape)
        array[:] = data
        array.flush()
    else:
        array = np.load(path, mmap_mode=mode)
    before = path.read_bytes()
    os.utime(path, ns=(10**18, 10**18))  # far from now: any update shows, whatever the clock's resolution
    fake = use(monkeypatch, FakeRuntime(read_only_supported=supported, touch_pages=True))
    table, must_not_write = as_table(array)
    if must_not_write is None:
        pinned_table, read_only = table, False
    else:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the copy-on-write warning, checked below
            pinned_table, read_only = pin_target.pinnable_table(table, must_not_write, pinning.read_only_register_supported(0))
    pinned = pinning.PinnedRange(pinned_table.data_ptr(), pinned_table.numel() * pinned_table.element_size(), read_only=read_only)
    flags = fake.registered[pinned_table.data_ptr()][1]
    perms, where = mapping_of(pinned_table.data_ptr())
    if mode != "c":  # a shared map: pinned read-only, or through a private map of the same bytes
        assert (flags & 0x08 and pinned_table is table) if supported else (not flags & 0x08 and perms.endswith("p"))
    assert where == str(path)
    torch.testing.assert_close(pinned_table[[5, 0, 1023]], torch.from_numpy(data[[5, 0, 1023]]))  # what a gather reads
    pinned.unpin()
    del pinned_table, table, must_not_write, array
    assert path.read_bytes() == before
    assert os.stat(path).st_mtime_ns == 10**18, f"mmap_mode={mode!r}: pinning wrote to the file"


def test_a_shared_writable_map_is_remapped_copy_on_write_with_a_warning(tmp_path):
    data, array = _mapped(tmp_path, mode="r+")
    table, must_not_write = as_table(array)
    assert must_not_write is array  # a writable map of the file is still one the store must not write
    with pytest.warns(UserWarning, match="copy-on-write"):
        private, read_only = pin_target.pinnable_table(table, must_not_write, read_only_supported=False)
    assert not read_only and mapping_of(private.data_ptr())[0] == "rw-p"
    torch.testing.assert_close(private, torch.from_numpy(data))


def test_a_slice_of_a_shared_map_is_remapped_at_its_own_offset(tmp_path):
    data, array = _mapped(tmp_path, mode="r")
    part = array[10:30]
    table, must_not_write = as_table(part)
    with pytest.warns(UserWarning, match="copy-on-write"):
        private, read_only = pin_target.pinnable_table(table, must_not_write, read_only_supported=False)
    assert not read_only and mapping_of(private.data_ptr())[0].endswith("p")
    torch.testing.assert_close(private, torch.from_numpy(data[10:30]))


# -- what a failure means ---------------------------------------------------


def test_out_of_memory_says_what_it_means_with_the_numbers(monkeypatch, tmp_path):
    use(monkeypatch, FakeRuntime(register_error="cudaErrorMemoryAllocation: out of memory"))
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       16777216 kB\nMemFree:          524288 kB\nMemAvailable:    1048576 kB\n")
    monkeypatch.setattr(pinning, "_MEMINFO", str(meminfo))
    monkeypatch.setattr(pinning, "_cgroup_room", lambda: (512 << 20, 8 << 30))
    # A small RLIMIT_MEMLOCK must not be blamed: the driver does not count these pages against it.
    monkeypatch.setattr(resource, "getrlimit", lambda which: (64 << 10, 64 << 10))
    with pytest.raises(RuntimeError) as caught:
        pinning.PinnedRange(0x90000, 3 << 30)
    text = str(caught.value)
    assert "3.0 GiB (3221225472 bytes)" in text
    assert "1.0 GiB available of 16.0 GiB" in text and "512.0 MiB more of its 8.0 GiB limit" in text
    assert "ulimit -l unlimited" not in text and "limits.conf" not in text and "is not what limits them" in text
    assert "backend='cpu'" in text and "cudaErrorMemoryAllocation" in text


def test_other_registration_failures_give_the_numbers_too(monkeypatch, tmp_path):
    use(monkeypatch, FakeRuntime(register_error="cudaErrorInvalidValue: invalid argument"))
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       8388608 kB\nMemAvailable:    4194304 kB\n")
    monkeypatch.setattr(pinning, "_MEMINFO", str(meminfo))
    monkeypatch.setattr(pinning, "_cgroup_room", lambda: None)
    monkeypatch.setattr(resource, "getrlimit", lambda which: (64 << 10, 64 << 10))
    with pytest.raises(RuntimeError) as caught:
        pinning.PinnedRange(0xA0000, 1 << 20)
    text = str(caught.value)
    assert "1.0 MiB (1048576 bytes)" in text and "4.0 GiB available of 8.0 GiB" in text and "ulimit" not in text


@pytest.mark.parametrize("version", [1, 2])
def test_the_cgroup_limit_is_read_for_either_cgroup_version(tmp_path, version):
    root = tmp_path / "cgroup"
    if version == 2:
        folder = root / "job"
        folder.mkdir(parents=True)
        (folder / "memory.max").write_text("8589934592\n")
        (folder / "memory.current").write_text("1073741824\n")
        proc = "0::/job\n"
    else:
        folder = root / "memory" / "job"
        folder.mkdir(parents=True)
        (folder / "memory.limit_in_bytes").write_text("8589934592\n")
        (folder / "memory.usage_in_bytes").write_text("1073741824\n")
        proc = "4:memory:/job\n1:cpu:/\n"
    (tmp_path / "cgroup.txt").write_text(proc)
    assert pinning._cgroup_room(str(tmp_path / "cgroup.txt"), str(root)) == (7 << 30, 8 << 30)
    (folder / ("memory.max" if version == 2 else "memory.limit_in_bytes")).write_text("max\n" if version == 2 else "9223372036854771712\n")
    assert pinning._cgroup_room(str(tmp_path / "cgroup.txt"), str(root)) is None


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

"""A memory-mapped table whose file is cut short while a store maps it.

Reading a mapped file past its end is SIGBUS: before the mend, ``FeatureStore("mm.npy")``, a
truncate and a gather killed the process ("Bus error", exit 135), which no ``except`` can stop. So
the cases run in a process of their own, each printing what the gather did: before the mend that
process dies of SIGBUS at the first case (the test fails on its exit code). Now each gather checks
the size of the very file mapped first and raises ``StorageChangedError`` naming it. The check
itself (:class:`~dgl_zerocopy.store.mapped_file.MappedFile`) is tested here in this process too: it
reads no page of the table, so a failing check cannot kill the test run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from conftest import REPO

from dgl_zerocopy import FeatureStore
from dgl_zerocopy.store.mapped_file import MappedFile
from dgl_zerocopy.store.storage import StorageChangedError

SCRIPT = r"""
import json, os, sys
from pathlib import Path
import numpy as np, torch
from dgl_zerocopy import FeatureStore, compress
from dgl_zerocopy.store.storage import StorageChangedError

root = Path(sys.argv[1])
rows = np.arange(20_000 * 64, dtype=np.float32).reshape(20_000, 64)
ids = torch.tensor([0, 19_999])
said = {}

def case(name, make, cut):
    store = make()
    store.gather(ids)
    cut()
    try:
        said[name] = ["gathered", store.gather(ids).numpy().tolist() == rows[[0, 19_999]].tolist()]
    except StorageChangedError as error:
        said[name] = ["refused", str(error)]
    store.close()

np.save(root / "mm.npy", rows)
case("npy path", lambda: FeatureStore(str(root / "mm.npy"), backend="cpu"), lambda: os.truncate(root / "mm.npy", 4096))
np.save(root / "user.npy", rows)
case("np.load mmap", lambda: FeatureStore(np.load(root / "user.npy", mmap_mode="r"), backend="cpu"), lambda: os.truncate(root / "user.npy", 200_000))
compress(rows, "int8", out=root / "codes")
case("compressed folder", lambda: FeatureStore(str(root / "codes"), backend="cpu"), lambda: os.truncate(root / "codes" / "codes.npy", 128))
np.save(root / "old.npy", rows)
np.save(root / "new.npy", rows[:10])
case("renamed over", lambda: FeatureStore(str(root / "old.npy"), backend="cpu"), lambda: os.replace(root / "new.npy", root / "old.npy"))
print(json.dumps(said))
"""


def test_the_check_follows_the_file_mapped_not_the_path(tmp_path):
    """The size of the very file mapped: a file renamed over the path is not it; a cut one is."""
    np.save(tmp_path / "a.npy", np.ones((1000, 16), np.float32))
    table = np.load(tmp_path / "a.npy", mmap_mode="r")
    store = FeatureStore(table, backend="cpu")
    check = store._mapped
    assert isinstance(check, MappedFile) and check.end == 128 + 1000 * 16 * 4
    np.save(tmp_path / "b.npy", np.ones((10, 16), np.float32))
    os.replace(tmp_path / "b.npy", tmp_path / "a.npy")  # the path now names a short file; the map is whole
    check.check()
    assert torch.equal(store.gather(torch.tensor([999])), torch.ones(1, 16))
    store.close()
    assert check._fd == -1  # closed with the store

    np.save(tmp_path / "c.npy", np.ones((1000, 16), np.float32))
    mapped = np.load(tmp_path / "c.npy", mmap_mode="r")
    check = MappedFile((str(tmp_path / "c.npy"), 128, "<f4", (1000, 16), "r"), mapped.ctypes.data)
    os.truncate(tmp_path / "c.npy", 1000)  # no page of it is read here: only its size
    with pytest.raises(StorageChangedError, match=r"c\.npy' was cut short to 1,000 bytes while a FeatureStore maps it \(the table needs 64,128\)"):
        check.check()
    check.close()
    del mapped


@pytest.mark.slow  # a process of its own (~5 s: torch's import)
def test_a_mapped_file_cut_short_is_refused_not_a_bus_error(tmp_path):
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path)], capture_output=True, text=True, encoding="utf-8", errors="replace", cwd=REPO, timeout=300
    )
    assert done.returncode == 0, f"exit {done.returncode} (-7: SIGBUS)\n{done.stderr}"
    said = json.loads(done.stdout.strip().splitlines()[-1])
    for name, file, size in (("npy path", "mm.npy", "4,096"), ("np.load mmap", "user.npy", "200,000"), ("compressed folder", "codes/codes.npy", "128")):
        what, message = said[name]
        assert what == "refused", (name, said[name])
        assert message.startswith(f"the feature file {str(tmp_path / file)!r} was cut short to {size} bytes while a FeatureStore maps it"), message
        assert "SIGBUS" in message and "FeatureStore(path, storage=StorageTier(N))" in message and "rename it into place" in message
    assert said["renamed over"] == ["gathered", True]  # the mapped file is untouched: its rows, no false alarm

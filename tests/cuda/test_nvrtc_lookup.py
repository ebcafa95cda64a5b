"""Finding NVRTC: the pip layouts of CUDA 12 and 13, CUDA toolkits, CuPy's lookup; the choice by
torch's CUDA major; the error that lists where it looked. Fake trees on the CPU, then what is installed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from dgl_zerocopy.cuda import nvrtc
from dgl_zerocopy.cuda.nvrtc import NvrtcLibrary, choose_nvrtc, nvrtc_candidates

NO_TOOLKIT = "/nonexistent/cuda"  # keeps a real /usr/local/cuda out of the fake-tree tests


def _touch(folder: Path, *names: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        (folder / name).write_bytes(b"")
    return folder


def _cu12_pip(site: Path) -> Path:
    # nvidia-cuda-nvrtc-cu12: a regular package with __init__.py files, the soname only.
    _touch(site / "nvidia", "__init__.py")
    _touch(site / "nvidia" / "cuda_nvrtc", "__init__.py")
    return _touch(site / "nvidia" / "cuda_nvrtc" / "lib", "__init__.py", "libnvrtc.so.12", "libnvrtc-builtins.so.12.1")


def _cu13_pip(site: Path) -> Path:
    # nvidia-cuda-nvrtc 13 (torch's cuda-toolkit[nvrtc]): "nvidia" is a namespace package here.
    return _touch(site / "nvidia" / "cu13" / "lib", "libnvrtc.so.13", "libnvrtc-builtins.so.13.2", "libcudart.so.13")


def _toolkit(root: Path, major: int) -> Path:
    """The layout of a CUDA toolkit: lib64 -> targets/x86_64-linux/lib, sonames as links."""
    lib = _touch(
        root / "targets" / "x86_64-linux" / "lib",
        f"libnvrtc.so.{major}.4.127",
        f"libnvrtc-builtins.so.{major}.4",
        f"libnvrtc.alt.so.{major}.4.127",
        "libnvrtc_static.a",
    )
    (lib / f"libnvrtc.so.{major}").symlink_to(f"libnvrtc.so.{major}.4.127")
    (lib / "libnvrtc.so").symlink_to(f"libnvrtc.so.{major}")
    (root / "lib64").symlink_to("targets/x86_64-linux/lib")
    return lib


def test_cuda12_pip_layout(tmp_path):
    lib = _cu12_pip(tmp_path / "site")
    found = nvrtc_candidates([str(tmp_path / "site")], {}, NO_TOOLKIT)
    assert found == [NvrtcLibrary(str(lib / "libnvrtc.so.12"), 12, "cu12 pip")]


def test_cuda13_pip_layout(tmp_path):
    lib = _cu13_pip(tmp_path / "site")
    found = nvrtc_candidates([str(tmp_path / "site")], {}, NO_TOOLKIT)
    assert found == [NvrtcLibrary(str(lib / "libnvrtc.so.13"), 13, "cu13 pip")]


def test_toolkit_layout_gives_the_soname_once(tmp_path):
    """lib64, lib and targets/*/lib are the same folder in a toolkit: one candidate, the soname;
    the builtins, the .alt library, the static archive and the unversioned link are not candidates."""
    _toolkit(tmp_path / "cuda-12.4", 12)
    found = nvrtc_candidates([], {"CUDA_PATH": str(tmp_path / "cuda-12.4")}, NO_TOOLKIT)
    assert found == [NvrtcLibrary(str(tmp_path / "cuda-12.4" / "lib64" / "libnvrtc.so.12"), 12, "CUDA_PATH")]


def test_toolkit_with_only_versioned_files(tmp_path):
    _touch(tmp_path / "cuda" / "lib64", "libnvrtc.so.13.0.88")
    found = nvrtc_candidates([], {"CUDA_HOME": str(tmp_path / "cuda")}, NO_TOOLKIT)
    assert found == [NvrtcLibrary(str(tmp_path / "cuda" / "lib64" / "libnvrtc.so.13.0.88"), 13, "CUDA_HOME")]


def test_default_toolkit_and_search_order(tmp_path):
    """pip wheels first (every sys.path folder), then CUDA_PATH, CUDA_HOME, /usr/local/cuda."""
    _cu13_pip(tmp_path / "site-a")
    _cu12_pip(tmp_path / "site-b")
    _toolkit(tmp_path / "path", 12)
    _toolkit(tmp_path / "home", 13)
    _toolkit(tmp_path / "default", 12)
    found = nvrtc_candidates(
        [str(tmp_path / "site-a"), "", str(tmp_path / "missing"), str(tmp_path / "site-b")],
        {"CUDA_PATH": str(tmp_path / "path"), "CUDA_HOME": str(tmp_path / "home")},
        str(tmp_path / "default"),
    )
    assert [(c.source, c.major) for c in found] == [("cu13 pip", 13), ("cu12 pip", 12), ("CUDA_PATH", 12), ("CUDA_HOME", 13), (str(tmp_path / "default"), 12)]


def test_the_same_file_twice_is_one_candidate(tmp_path):
    _toolkit(tmp_path / "cuda", 12)
    os.symlink(tmp_path / "cuda", tmp_path / "cuda-link")
    found = nvrtc_candidates([], {"CUDA_PATH": str(tmp_path / "cuda"), "CUDA_HOME": str(tmp_path / "cuda-link")}, str(tmp_path / "cuda"))
    assert [c.source for c in found] == ["CUDA_PATH"]


def test_a_dangling_link_is_not_a_candidate(tmp_path):
    lib = _touch(tmp_path / "cuda" / "lib64")
    (lib / "libnvrtc.so.12").symlink_to("libnvrtc.so.12.9.0")  # the target was removed
    assert nvrtc_candidates([], {"CUDA_PATH": str(tmp_path / "cuda")}, NO_TOOLKIT) == []


def test_nothing_found(tmp_path):
    assert nvrtc_candidates([str(tmp_path)], {"CUDA_PATH": str(tmp_path / "nope")}, NO_TOOLKIT) == []


CU12_PIP = NvrtcLibrary("/site/nvidia/cuda_nvrtc/lib/libnvrtc.so.12", 12, "cu12 pip")
CU13_PIP = NvrtcLibrary("/site/nvidia/cu13/lib/libnvrtc.so.13", 13, "cu13 pip")
CU12_TOOLKIT = NvrtcLibrary("/usr/local/cuda/lib64/libnvrtc.so.12", 12, "CUDA_PATH")


@pytest.mark.parametrize(
    "cuda_major,expected",
    [
        (12, CU12_PIP),  # torch cu12: its own NVRTC, although a newer one exists
        (13, CU13_PIP),
        (None, CU13_PIP),  # CPU torch: the newest
        (11, CU13_PIP),  # no match: the newest
    ],
)
def test_choice_prefers_torchs_cuda_major_then_the_newest(cuda_major, expected):
    assert choose_nvrtc([CU12_PIP, CU13_PIP, CU12_TOOLKIT], cuda_major) == expected


def test_choice_among_equals_keeps_the_search_order():
    assert choose_nvrtc([CU12_TOOLKIT, CU12_PIP], None) == CU12_TOOLKIT
    assert choose_nvrtc([CU12_PIP, CU12_TOOLKIT], 12) == CU12_PIP
    assert choose_nvrtc([], 12) is None


@pytest.fixture
def fresh_lookup():
    nvrtc.find_nvrtc.cache_clear()
    yield
    nvrtc.find_nvrtc.cache_clear()


def test_not_found_names_every_place_and_the_fix(monkeypatch, fresh_lookup):
    monkeypatch.setattr(nvrtc, "nvrtc_candidates", lambda *args, **kwargs: [])
    monkeypatch.setattr(nvrtc, "_nvrtc_from_loaders", lambda major: (None, ["CuPy's lookup (cuda-pathfinder: not installed)", "the dynamic linker (...)"]))
    with pytest.raises(FileNotFoundError) as error:
        nvrtc.find_nvrtc()
    message = str(error.value)
    for place in (
        "nvidia/cuda_nvrtc/lib",
        "nvidia/cu13/lib",
        "sys.path",
        "$CUDA_PATH",
        "$CUDA_HOME",
        "/usr/local/cuda",
        "lib64",
        "cuda-pathfinder",
        "dynamic linker",
        "pip install dgl-zerocopy[cuda12]",
        "dgl-zerocopy[cuda13]",
        "set CUDA_PATH",
    ):
        assert place in message, place


def test_loaders_are_asked_only_when_no_file_is_found(monkeypatch, fresh_lookup):
    monkeypatch.setattr(nvrtc, "nvrtc_candidates", lambda *args, **kwargs: [CU12_TOOLKIT])
    monkeypatch.setattr(nvrtc, "_nvrtc_from_loaders", lambda major: pytest.fail("loaders asked"))
    assert nvrtc.find_nvrtc() == CU12_TOOLKIT


# --------------------------------------------------------------------------- what is installed

try:
    INSTALLED = nvrtc.find_nvrtc()
except FileNotFoundError:
    INSTALLED = None
requires_nvrtc = pytest.mark.skipif(INSTALLED is None, reason="no NVRTC installed")


def _run(code: str, **env: str) -> dict:
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, encoding="utf-8", env={**os.environ, **env}, timeout=120)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


@requires_nvrtc
def test_installed_nvrtc_is_the_one_of_torchs_wheel():
    """torch's CUDA 12 wheels bring nvidia/cuda_nvrtc, its CUDA 13 wheels nvidia/cu13."""
    major = int(torch.version.cuda.split(".")[0]) if torch.version.cuda else None
    pip = {12: ("cu12 pip", "nvidia/cuda_nvrtc/lib"), 13: ("cu13 pip", "nvidia/cu13/lib")}
    if major not in pip or not any(os.path.isdir(os.path.join(p, pip[major][1])) for p in sys.path if p):
        pytest.skip(f"torch {torch.__version__} brought no NVRTC wheel")
    assert (INSTALLED.source, INSTALLED.major) == (pip[major][0], major)
    assert INSTALLED.path.replace(os.sep, "/").endswith(f"{pip[major][1]}/libnvrtc.so.{major}")
    assert nvrtc.nvrtc_version()[0] == major
    assert nvrtc.nvrtc_library_path() == INSTALLED.path


@requires_nvrtc
def test_real_library_in_a_toolkit_layout_compiles(tmp_path):
    """CUDA_PATH: the installed library linked into a toolkit tree, found and used from there (a
    fresh process, the pip folders off sys.path, so the builtins come from the toolkit folder)."""
    lib = tmp_path / "cuda" / "targets" / "x86_64-linux" / "lib"
    lib.mkdir(parents=True)
    real = Path(os.path.realpath(INSTALLED.path))
    for path in [real, *real.parent.glob("libnvrtc-builtins.so*")]:
        (lib / path.name).symlink_to(path)
    (tmp_path / "cuda" / "lib64").symlink_to("targets/x86_64-linux/lib")
    code = (
        "import json, sys, torch\n"
        "from dgl_zerocopy.cuda import nvrtc\n"
        "sys.path[:] = [p for p in sys.path if not p.endswith('site-packages')]\n"
        "found = nvrtc.find_nvrtc()\n"
        "from dgl_zerocopy.cuda.gather import launcher\n"
        "launcher.compile_check(nvrtc.default_archs()[-1], ['gather_aligned<uint4, long long>'])\n"
        "print(json.dumps([found.source, found.path, list(nvrtc.nvrtc_version())]))\n"
    )
    source, path, version = _run(code, CUDA_PATH=str(tmp_path / "cuda"))
    assert (source, path) == ("CUDA_PATH", str(tmp_path / "cuda" / "lib64" / real.name))
    assert version[0] == INSTALLED.major


@requires_nvrtc
def test_dynamic_linker_finds_it_on_ld_library_path():
    """CuPy 13's lookup: dlopen by soname; the path comes back from dladdr."""
    real = os.path.realpath(INSTALLED.path)
    code = (
        "import json, sys\n"
        "sys.modules['cuda'] = None  # no cuda-pathfinder: the dynamic linker alone\n"
        "from dgl_zerocopy.cuda import nvrtc\n"
        "found, tried = nvrtc._nvrtc_from_loaders(None)\n"
        "print(json.dumps([found.source, found.path, found.major, tried]))\n"
    )
    source, path, major, tried = _run(code, LD_LIBRARY_PATH=os.path.dirname(real))
    assert (source, path, major) == ("dynamic linker", real, INSTALLED.major)
    assert tried == ["CuPy's lookup (cuda-pathfinder: not installed)"]


@pytest.mark.slow
def test_cupys_lookup_through_cuda_pathfinder():
    """CuPy 14 finds NVRTC with cuda-pathfinder: the same library, labelled as CuPy's lookup."""
    pytest.importorskip("cuda.pathfinder")
    code = (
        "import json\n"
        "from dgl_zerocopy.cuda import nvrtc\n"
        "found, tried = nvrtc._nvrtc_from_loaders(None)\n"
        "print(json.dumps(found and [found.source, found.path, found.major]))\n"
    )
    found = _run(code)
    if INSTALLED is None:
        assert found is None
        return
    source, path, major = found
    assert source.startswith("CuPy's lookup (cuda-pathfinder: ") and os.path.isfile(path), found
    assert major in (12, 13)


@pytest.mark.slow
@requires_nvrtc
def test_cupy_gets_the_nvrtc_of_its_cuda_major():
    """CuPy 13 dlopens libnvrtc.so.12 by name, which the pip wheel is not found as: the launcher
    loads it first (a fresh process; no GPU needed to load NVRTC)."""
    pytest.importorskip("cupy")
    code = (
        "import json, cupy\n"
        "from dgl_zerocopy.cuda import nvrtc\n"
        "nvrtc.preload_for_cupy(cupy)\n"
        "print(json.dumps([list(cupy.cuda.nvrtc.getVersion()), cupy.cuda.get_local_runtime_version() // 1000]))\n"
    )
    version, cupy_major = _run(code)
    assert version[0] == cupy_major
    if cupy_major == INSTALLED.major:
        assert tuple(version) == nvrtc.nvrtc_version()

"""Every gather kernel instantiation compiles with NVRTC for the architectures the found NVRTC
supports (NVRTC 12: sm_70 to sm_90; NVRTC 13: sm_75 to sm_100); no GPU needed."""

from __future__ import annotations

import importlib
import logging
import subprocess
import sys

import pytest

from dgl_zerocopy import cuda_gather
from dgl_zerocopy.kernel_source import kernel_dir, kernel_sources_digest, read_kernel


def _nvrtc_archs() -> tuple[str, ...]:
    try:
        return cuda_gather.default_archs()
    except OSError:  # not found (FileNotFoundError) or not loadable
        return ()


ARCHS = _nvrtc_archs()
requires_nvrtc = pytest.mark.skipif(
    not ARCHS,
    reason="no NVRTC found (torch's CUDA wheels bring it; or pip install dgl-zerocopy[cuda12] or [cuda13])",
)


@requires_nvrtc
@pytest.mark.parametrize("arch", ARCHS or ["no-nvrtc"])
def test_all_instantiations_compile_without_warnings(arch, caplog):
    with caplog.at_level(logging.WARNING, logger="dgl_zerocopy.cuda_gather"):
        cuda_gather.compile_check(arch)
    assert not caplog.records, caplog.text


@requires_nvrtc
def test_compile_error_carries_the_nvrtc_log():
    with pytest.raises(cuda_gather.KernelCompileError, match="no_such_type"):
        cuda_gather.compile_check("sm_80", ["gather_aligned<no_such_type, int>"])


@requires_nvrtc
def test_nvrtc_version_is_12_or_13_and_agrees_with_the_file_name():
    major, _ = cuda_gather.nvrtc_version()
    assert major in (12, 13)
    assert major == cuda_gather.find_nvrtc().major


@requires_nvrtc
def test_archs_follow_the_nvrtc_major():
    """CUDA 13 dropped sm_50 to sm_72; sm_100 arrived in 12.8."""
    major, minor = cuda_gather.nvrtc_version()
    if major == 13:
        assert ARCHS == ("sm_75", "sm_80", "sm_90", "sm_100")
    else:
        expected = ("sm_70", "sm_75", "sm_80", "sm_90") + (("sm_100",) if minor >= 8 else ())
        assert ARCHS == expected
    assert set(ARCHS) <= set(cuda_gather.supported_archs())


@requires_nvrtc
def test_an_arch_the_nvrtc_does_not_support_is_a_clear_value_error():
    supported = cuda_gather.supported_archs()
    arch = next(arch for arch in ("sm_50", "sm_100", "sm_30") if arch not in supported)
    major, minor = cuda_gather.nvrtc_version()
    with pytest.raises(ValueError) as error:
        cuda_gather.compile_check(arch)
    message = str(error.value)
    assert arch in message and f"NVRTC {major}.{minor}" in message and supported[-1] in message, message


def test_bad_arch_is_rejected_before_compiling():
    with pytest.raises(ValueError, match="sm_80"):
        cuda_gather.compile_check("ampere")


def test_kernel_sources_are_found_and_read():
    assert (kernel_dir() / "gather.cu").is_file()
    assert "gather_aligned" in read_kernel("gather.cu")
    assert len(kernel_sources_digest()) == 64
    with pytest.raises(ValueError, match="file name"):
        read_kernel("../pyproject.toml")
    with pytest.raises(FileNotFoundError, match="gather.cu"):
        read_kernel("missing.cu")


def test_no_cuda_in_python_strings():
    """The kernels live in .cu files; the launcher only names instantiations."""
    source = read_kernel("gather.cu")
    for name in ("gather_aligned", "gather_naive"):
        assert f"__global__ void {name}(" in source


def test_both_aligned_kernels_take_the_optional_hot_row_cache():
    """The cached gather is the aligned kernels with a slot map (no extra instantiations): every
    instantiation that test_all_instantiations_compile_without_warnings compiles carries it."""
    source = read_kernel("gather.cu")
    for name in ("gather_aligned", "gather_decode"):
        start = source.index(f"__global__ void {name}(")
        signature = source[start: source.index("{", start)]
        assert "const void* __restrict__ slot_map, int slot_bytes" in signature, name
        assert "const char* __restrict__ cache_rows, long long cache_stride" in signature, name
    assert source.count("zc_row_source(") == 3  # defined once, called by both kernels


def test_launcher_imports_without_cupy():
    code = (
        "import sys; sys.modules['cupy'] = None\n"
        "import dgl_zerocopy.cuda_gather, dgl_zerocopy.emulator, dgl_zerocopy.pcie_model\n"
        "from dgl_zerocopy.cuda_gather import launch_gather\n"
        "try:\n"
        "    launch_gather(0, (1, 1), 4, 4, [], 0)\n"
        "except RuntimeError as e:\n"
        "    assert 'CuPy' in str(e), e\n"
        "else:\n"
        "    raise SystemExit('launch_gather ran without CuPy')\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, encoding="utf-8")
    assert result.returncode == 0, result.stderr


def test_kernels_package_re_exports_the_launcher():
    try:
        kernels = importlib.import_module("dgl_zerocopy.kernels")
    except ModuleNotFoundError:
        pytest.skip("dgl_zerocopy.kernels exists once the package is installed (make install)")
    assert kernels.launch_gather is cuda_gather.launch_gather
    assert kernels.compile_check is cuda_gather.compile_check
    assert kernels.nvrtc_version is cuda_gather.nvrtc_version
    assert kernels.find_nvrtc is cuda_gather.find_nvrtc
    assert kernels.default_archs is cuda_gather.default_archs
    with pytest.raises(AttributeError):
        kernels.no_such_name  # noqa: B018

"""Every gather kernel instantiation compiles with NVRTC for sm_70, sm_80, sm_90 (no GPU needed)."""

from __future__ import annotations

import importlib
import importlib.util
import logging
import subprocess
import sys

import pytest

from dgl_zerocopy import cuda_gather
from dgl_zerocopy.kernel_source import kernel_dir, kernel_sources_digest, read_kernel


def _nvrtc_installed() -> bool:
    try:
        return importlib.util.find_spec("nvidia.cuda_nvrtc") is not None
    except ModuleNotFoundError:
        return False


requires_nvrtc = pytest.mark.skipif(
    not _nvrtc_installed(),
    reason="pip package nvidia-cuda-nvrtc-cu12 (installed with torch's CUDA wheel) is absent",
)


@requires_nvrtc
@pytest.mark.parametrize("arch", ["sm_70", "sm_80", "sm_90"])
def test_all_instantiations_compile_without_warnings(arch, caplog):
    with caplog.at_level(logging.WARNING, logger="dgl_zerocopy.cuda_gather"):
        cuda_gather.compile_check(arch)
    assert not caplog.records, caplog.text


@requires_nvrtc
def test_compile_error_carries_the_nvrtc_log():
    with pytest.raises(cuda_gather.KernelCompileError, match="no_such_type"):
        cuda_gather.compile_check("sm_80", ["gather_aligned<no_such_type, int>"])


@requires_nvrtc
def test_nvrtc_version_is_12():
    major, _ = cuda_gather.nvrtc_version()
    assert major == 12


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
    with pytest.raises(AttributeError):
        kernels.no_such_name  # noqa: B018

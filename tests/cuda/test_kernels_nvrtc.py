"""Every gather kernel instantiation compiles with NVRTC for the architectures the found NVRTC
supports (NVRTC 12: sm_70 to sm_90; NVRTC 13: sm_75 to sm_100); no GPU needed."""

from __future__ import annotations

import importlib
import logging
import re

import pytest
from nvrtc_archs import ARCH_PARAMS, ARCHS, requires_nvrtc
from script_runs import assert_runs_without

from dgl_zerocopy.cuda import nvrtc
from dgl_zerocopy.cuda.gather import instantiations, launcher
from dgl_zerocopy.cuda.kernel_source import flush_to_zero, gpu_flushes_subnormals, kernel_dir, kernel_options, kernel_sources_digest, nvrtc_options, read_kernel


@requires_nvrtc
@pytest.mark.parametrize("arch", ARCH_PARAMS)
def test_all_instantiations_compile_without_warnings(arch, caplog):
    with caplog.at_level(logging.WARNING, logger="dgl_zerocopy.cuda.gather.launcher"):
        launcher.compile_check(arch)
    assert not caplog.records, caplog.text


@requires_nvrtc
def test_no_instruction_flushes_subnormals_under_cupys_options():
    """CuPy compiles with -ftz=true; float arithmetic that has a .ftz form (CUDA's __fmul_rn,
    __fadd_rn, C operators) would get it and flush subnormal features to zero. The PTX of every
    instantiation, compiled with CuPy's options, must hold no .ftz instruction."""
    options = nvrtc_options("compute_90")
    assert "-ftz=true" in options and flush_to_zero(options)
    arch = f"compute_{ARCHS[-1].removeprefix('sm_')}"
    ptx = launcher.compile_check(arch).decode()
    assert ptx.count(".entry ") == len(instantiations.all_name_expressions())
    flushing = sorted(set(re.findall(r"\b[a-z]+(?:\.[a-z0-9]+)*\.ftz(?:\.[a-z0-9]+)*", ptx)))
    assert not flushing, f"instructions that flush subnormals: {flushing}"
    assert "mul.rn.f32" in ptx and "add.rn.f32" in ptx  # the int8 affine map, two roundings, no FMA


@requires_nvrtc
def test_compile_check_returns_the_cubin_or_the_ptx():
    name = ["gather_aligned<uint4, long long>"]
    cubin = launcher.compile_check(ARCHS[0], name)
    assert cubin[:4] == b"\x7fELF"
    ptx = launcher.compile_check(ARCHS[0].replace("sm_", "compute_"), name).decode()
    assert f".target {ARCHS[0]}" in ptx and ptx.count(".entry ") == 1 and "\0" not in ptx


def test_flush_to_zero_reads_the_last_ftz_option():
    assert not flush_to_zero(())  # NVRTC's default
    assert flush_to_zero(("-ftz=true",)) and flush_to_zero(("--ftz=true",))
    assert not flush_to_zero(("-ftz=true", "--std=c++17", "-ftz=false"))
    assert flush_to_zero(("--ftz=false", "-ftz=true"))
    assert gpu_flushes_subnormals()  # CuPy passes -ftz=true


def _options_cupy_passes(monkeypatch, user_options: tuple[str, ...], arch: str) -> tuple[str, ...]:
    """The options CuPy's own compile path (``RawModule`` -> ``compile_with_cache`` ->
    ``_compile_module_with_cache`` -> NVRTC) hands to NVRTC for ``user_options``, without a GPU:
    the device queries (which architecture) and the NVRTC program are stand-ins; everything
    between them is CuPy's code as installed."""
    try:
        from cupy._core import core
        from cupy.cuda import compiler
    except Exception as error:  # noqa: BLE001 - CuPy missing or unusable here
        pytest.skip(f"CuPy is not importable here ({type(error).__name__}: {error})")

    class Captured(Exception):
        pass

    seen = []

    class RecordingProgram:
        def __init__(self, source, *args, **kwargs):
            self.source = source

        def compile(self, options=(), log_stream=None):
            if not self.source:  # CuPy's probe of the compiler version (an empty source)
                return b"", None
            seen.append(tuple(options))
            raise Captured

    for name in ("CUPY_NVRTC_USE_PCH", "CUPY_CUDA_COMPILE_WITH_DEBUG"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("CUPY_CACHE_IN_MEMORY", "1")  # compile, never read a disk cache
    monkeypatch.setattr(compiler, "_NVRTCProgram", RecordingProgram)
    monkeypatch.setattr(compiler, "_get_arch", lambda: arch)
    monkeypatch.setattr(compiler, "_get_arch_for_options_for_nvrtc", lambda arch=None: (f"-arch=sm_{arch}", "cubin"))
    with pytest.raises(Captured):
        # What cupy.RawModule(code=..., options=..., name_expressions=...) calls (cupy/_core/raw.pyx).
        core.compile_with_cache(read_kernel("gather.cu"), user_options, prepend_cupy_headers=False, name_expressions=["gather_aligned<uint4, long long>"])
    assert len(seen) == 1
    return seen[0]


def test_compile_options_are_the_ones_cupy_passes(monkeypatch):
    """The NVRTC compile check compiles with exactly the options CuPy gives NVRTC on the GPU (the
    same set; include paths in the same order): -ftz=true above all, which changes the code."""
    cupy_options = _options_cupy_passes(monkeypatch, kernel_options(), "90")
    ours = nvrtc_options("sm_90")
    assert sorted(ours) == sorted(cupy_options), f"ours: {ours}\nCuPy's: {cupy_options}"
    includes = [o for o in ours if o.startswith(("-I", "--include-path"))]
    assert includes == [o for o in cupy_options if o.startswith(("-I", "--include-path"))]
    assert "-ftz=true" in cupy_options


@requires_nvrtc
def test_compile_error_carries_the_nvrtc_log():
    with pytest.raises(nvrtc.KernelCompileError, match="no_such_type"):
        launcher.compile_check("sm_80", ["gather_aligned<no_such_type, int>"])


@requires_nvrtc
def test_nvrtc_version_is_12_or_13_and_agrees_with_the_file_name():
    major, _ = nvrtc.nvrtc_version()
    assert major in (12, 13)
    assert major == nvrtc.find_nvrtc().major


@requires_nvrtc
def test_archs_follow_the_nvrtc_major():
    """CUDA 13 dropped sm_50 to sm_72; sm_100 arrived in 12.8."""
    major, minor = nvrtc.nvrtc_version()
    if major == 13:
        assert ARCHS == ("sm_75", "sm_80", "sm_90", "sm_100")
    else:
        expected = ("sm_70", "sm_75", "sm_80", "sm_90") + (("sm_100",) if minor >= 8 else ())
        assert ARCHS == expected
    assert set(ARCHS) <= set(nvrtc.supported_archs())


@requires_nvrtc
def test_an_arch_the_nvrtc_does_not_support_is_a_clear_value_error():
    supported = nvrtc.supported_archs()
    arch = next(arch for arch in ("sm_50", "sm_100", "sm_30") if arch not in supported)
    major, minor = nvrtc.nvrtc_version()
    with pytest.raises(ValueError) as error:
        launcher.compile_check(arch)
    message = str(error.value)
    assert arch in message and f"NVRTC {major}.{minor}" in message and supported[-1] in message, message


def test_bad_arch_is_rejected_before_compiling():
    for arch in ("ampere", "sm_8", "compute80", "lto_90"):
        with pytest.raises(ValueError, match="sm_80"):
            launcher.compile_check(arch)


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
        signature = source[start : source.index("{", start)]
        assert "const void* __restrict__ slot_map, int slot_bytes" in signature, name
        assert "const char* __restrict__ cache_rows, long long cache_stride" in signature, name
    assert source.count("zc_row_source(") == 3  # defined once, called by both kernels


def test_launcher_imports_without_cupy():
    code = (
        "import dgl_zerocopy.cuda.gather.launcher, dgl_zerocopy.cuda.gather.emulator, dgl_zerocopy.cuda.gather.pcie_model\n"
        "from dgl_zerocopy.cuda.gather.launcher import launch_gather\n"
        "try:\n"
        "    launch_gather(0, (1, 1), 4, 4, [], 0)\n"
        "except RuntimeError as e:\n"
        "    assert 'CuPy' in str(e), e\n"
        "else:\n"
        "    raise SystemExit('launch_gather ran without CuPy')\n"
    )
    assert_runs_without("cupy", code)


def test_kernels_package_re_exports_the_launcher():
    try:
        kernels = importlib.import_module("dgl_zerocopy.kernels")
    except ModuleNotFoundError:
        pytest.skip("dgl_zerocopy.kernels exists once the package is installed (make install)")
    assert kernels.launch_gather is launcher.launch_gather
    assert kernels.compile_check is launcher.compile_check
    assert kernels.nvrtc_version is nvrtc.nvrtc_version
    assert kernels.find_nvrtc is nvrtc.find_nvrtc
    assert kernels.default_archs is nvrtc.default_archs
    with pytest.raises(AttributeError):
        kernels.no_such_name  # noqa: B018

"""Every name the package takes from CuPy and ``torch.cuda`` exists in the installed versions.

No GPU ever runs most of this code in CI, so a call such as ``cupy.cuda.runtime.hostGetDevicePointer``
(no CuPy version has it) would only fail on first contact with a GPU. Importing CuPy and looking
names up needs no GPU, so this runs everywhere CuPy is installed. See ``api_surface.py`` for the
scan's conventions.
"""

from __future__ import annotations

import re
import textwrap

import pytest
import torch
from api_surface import first_missing, installed_version, problems, scan_source, scan_tree
from conftest import REPO
from packaging.version import Version

pytest.importorskip("cupy", reason="CuPy is not installed: nothing to check the package's CuPy calls against")

FOLDERS = ("dgl_zerocopy", "bench")

# Names that only newer versions have: name -> the first version of its library that has it.
# The package must reach them through getattr(owner, "name", None) and fall back when it is None.
OPTIONAL = {
    # CuPy 14: Stream.from_external(obj) with obj.__cuda_stream__(); CuPy 13 has only ExternalStream.
    "cupy.cuda.Stream.from_external": "14"
}

# Attributes of objects that the scan cannot type (a method called on a stream, an event, a tensor
# or a CuPy object): kept by hand from `grep -rn "cupy\|torch.cuda\|record_stream\|wait_event"
# dgl_zerocopy bench`. Add a name here when the package starts calling it.
USED_ON_OBJECTS = {
    "torch.cuda.Stream": ("wait_event", "wait_stream", "record_event", "synchronize", "query", "cuda_stream"),
    "torch.cuda.Event": ("record", "synchronize", "elapsed_time", "query", "wait"),
    "torch.Tensor": ("record_stream", "pin_memory", "is_pinned", "data_ptr", "element_size", "is_cuda"),
    "cupy.cuda.runtime": (
        "pointerGetAttributes",
        "PointerAttributes",
        "hostRegister",
        "hostUnregister",
        "deviceGetAttribute",
        "cudaDevAttrHostRegisterReadOnlySupported",
        "CUDARuntimeError",
        "getDevice",
        "getDeviceCount",
        "memoryTypeHost",
    ),
    # A property of the class, so the lookup works without an instance (and without a GPU).
    "cupy.cuda.runtime.PointerAttributes": ("devicePointer", "type"),
    "cupy.cuda": ("UnownedMemory", "MemoryPointer", "Device", "Stream", "ExternalStream"),
    "cupy.cuda.Device": ("attributes",),
    "cupy.cuda.MemoryPointer": ("ptr",),
    "cupy.RawModule": ("get_function", "compile"),
    "cupy.ndarray": ("data", "flags", "astype", "nbytes"),
}


def _scan(source: str, path: str = "snippet.py"):
    return scan_source(textwrap.dedent(source), path)


@pytest.fixture(scope="module")
def package_refs():
    return scan_tree(REPO, FOLDERS)


def test_every_name_the_package_takes_from_cupy_and_torch_cuda_resolves(package_refs):
    bad = problems(package_refs, OPTIONAL)
    assert not bad, "names the installed CuPy/torch do not have:\n" + "\n".join(bad)


def test_the_scan_of_the_package_finds_its_cuda_calls(package_refs):
    """Guards against a scan that passes because it finds nothing."""
    chains = {r.chain for r in package_refs}
    assert len(chains) > 10, f"only {len(chains)} distinct references found: {sorted(chains)}"
    expected = {
        "cupy.cuda.runtime.hostRegister",
        "cupy.cuda.runtime.hostUnregister",
        "cupy.cuda.Device",
        "cupy.RawModule",
        "torch.cuda.Event",
        "torch.cuda.Stream",
        "torch.cuda.current_stream",
    }
    assert expected <= chains, f"not found: {sorted(expected - chains)}"
    files = {r.path for r in package_refs}
    assert {
        "dgl_zerocopy/store/pinning.py",
        "dgl_zerocopy/cuda/gather/launcher.py",
        "dgl_zerocopy/cuda/sampling/launcher.py",
        "dgl_zerocopy/loading/loader.py",
    } <= files, sorted(files)


def test_the_storage_tier_is_scanned_and_the_event_methods_it_calls_are_checked(package_refs):
    """The storage tier (dgl_zerocopy/store/storage/) records a CUDA event after each zero-copy gather
    and gives the gather's host-buffer slots back once it has passed: the event is made through
    ``torch.cuda`` (scanned), its methods are called on an object the scan cannot type (checked
    through :data:`USED_ON_OBJECTS`)."""
    storage = {r.chain for r in package_refs if r.path.startswith("dgl_zerocopy/store/storage/")}
    assert {"torch.cuda.Event", "torch.cuda.stream"} <= storage, sorted(storage)
    folder = REPO / "dgl_zerocopy" / "store" / "storage"
    called = {name for path in folder.glob("*.py") for name in re.findall(r"\bevent\.(\w+)\(", path.read_text())}
    assert {"record", "query", "synchronize"} <= called, sorted(called)
    assert called <= set(USED_ON_OBJECTS["torch.cuda.Event"]), f"add to USED_ON_OBJECTS: {sorted(called - set(USED_ON_OBJECTS['torch.cuda.Event']))}"


def test_missing_runtime_function_reached_through_from_import_is_reported():
    refs = _scan(
        """
        def pin(p):
            from cupy.cuda import runtime
            runtime.hostRegister(p, 8, 0)
            return int(runtime.hostGetDevicePointer(p, 0))
    """,
        "pin.py",
    )
    bad = problems(refs, OPTIONAL)
    assert len(bad) == 1, bad
    assert bad[0].startswith("pin.py:5: cupy.cuda.runtime.hostGetDevicePointer does not exist in cupy "), bad[0]


def test_missing_runtime_function_reached_through_an_accessor_is_reported():
    refs = _scan(
        """
        def _runtime():
            from cupy.cuda import runtime
            return runtime

        def pin(p):
            runtime = _runtime()
            runtime.hostRegister(p, 8, 0)
            _runtime().hostUnregister(p)
            return int(runtime.hostGetDevicePointer(p, 0))
    """,
        "pin.py",
    )
    assert {r.chain for r in refs} == {
        "cupy.cuda.runtime",
        "cupy.cuda.runtime.hostRegister",
        "cupy.cuda.runtime.hostUnregister",
        "cupy.cuda.runtime.hostGetDevicePointer",
    }
    bad = problems(refs, OPTIONAL)
    assert len(bad) == 1 and bad[0].startswith("pin.py:10: cupy.cuda.runtime.hostGetDevicePointer does not exist in cupy"), bad


def test_missing_name_in_a_direct_chain_is_reported():
    bad = problems(_scan("import cupy\nptr = cupy.cuda.runtime.hostGetDevicePointer(1, 0)\n", "direct.py"), OPTIONAL)
    assert len(bad) == 1 and bad[0].startswith("direct.py:2: cupy.cuda.runtime.hostGetDevicePointer does not exist in cupy"), bad


@pytest.mark.parametrize(
    "source",
    [
        "from cupy.cuda.runtime import hostGetDevicePointer\n",
        "import cupy.cuda.nosuchmodule\n",
        "from torch.cuda import NoSuchEvent\n",
        "import torch\ntorch.cuda.NoSuchEvent()\n",
        "import cupy.cuda.runtime as rt\nrt.nosuch\n",
        "def f(cupy):\n    return cupy.nosuch.Device\n",
    ],
    ids=["from-import", "submodule", "torch-from-import", "torch-chain", "import-as", "parameter"],
)
def test_every_way_to_reach_a_missing_name_is_reported(source):
    bad = problems(_scan(source), OPTIONAL)
    assert len(bad) == 1 and " does not exist in " in bad[0], bad


def test_binding_conventions():
    """What the scan takes for a module, where chains stop, and what it leaves alone."""
    refs = _scan("""
        import torch
        import cupy as cp
        from cupy import RawModule
        from cupy.cuda import runtime
        from torch.cuda import Event

        class Backend:
            def __init__(self):
                import cupy
                self._cupy = cupy

            def run(self, n):
                cupy = self._cupy
                cupy.cuda.Device(0).attributes["MultiProcessorCount"]
                self._cupy.cuda.runtime.getDevice()
                torch.cuda.current_stream().wait_event(Event())
                torch.nn.Linear(n, n)
                return getattr(cupy.cuda.Stream, "from_external", None)

        def launch(cupy, ids, runtime):
            runtime.not_cupy_here
            return cupy.asarray(ids)[0].item()

        def other():
            _cupy().cuda.runtime.getDeviceCount()
            rt = cp.cuda.runtime
            rt.hostRegister
            stream = object()
            stream.cuda_stream
            return hasattr(runtime, "pointerGetAttributes")
    """)
    assert [(r.line, r.chain, r.guarded) for r in refs] == [
        (4, "cupy.RawModule", False),
        (5, "cupy.cuda.runtime", False),
        (6, "torch.cuda.Event", False),
        (15, "cupy.cuda.Device", False),  # stops at the call
        (16, "cupy.cuda.runtime.getDevice", False),  # self._cupy
        (17, "torch.cuda.current_stream", False),
        (19, "cupy.cuda.Stream", False),
        (19, "cupy.cuda.Stream.from_external", True),
        (23, "cupy.asarray", False),  # a parameter named cupy; `runtime` the parameter is not tracked
        (26, "cupy.cuda.runtime.getDeviceCount", False),  # _cupy()
        (27, "cupy.cuda.runtime", False),
        (28, "cupy.cuda.runtime.hostRegister", False),  # through the alias rt
        (31, "cupy.cuda.runtime.pointerGetAttributes", True),
    ]


def test_optional_name_used_without_getattr_is_reported():
    refs = _scan(
        """
        import cupy
        def stream_of(handle):
            make = getattr(cupy.cuda.Stream, "from_external", None)
            return cupy.cuda.Stream.from_external(handle)
    """,
        "s.py",
    )
    bad = problems(refs, OPTIONAL)
    assert len(bad) == 1 and bad[0].startswith("s.py:5: cupy.cuda.Stream.from_external needs cupy >= 14"), bad


def test_guarded_name_outside_the_table_must_resolve():
    refs = _scan(
        """
        from cupy.cuda import runtime
        new = getattr(runtime, "hostGetDevicePointer", None)
        ok = hasattr(runtime, "pointerGetAttributes")
    """,
        "g.py",
    )
    bad = problems(refs, OPTIONAL)
    assert len(bad) == 1 and bad[0].startswith("g.py:3: getattr/hasattr of cupy.cuda.runtime.hostGetDevicePointer does not exist in cupy"), bad


@pytest.mark.parametrize("name,version", OPTIONAL.items())
def test_optional_name_resolves_or_the_installed_version_is_older(name, version):
    owner = name.rsplit(".", 1)[0]
    assert first_missing(owner) is None, f"{owner} (the object getattr looks {name} up on) does not resolve"
    installed = Version(installed_version(name))
    missing = first_missing(name)
    assert missing is None or installed < Version(version), f"{name} is listed as new in {version}, but {missing} is missing in the installed {installed}"


def test_attributes_used_on_cuda_objects_exist():
    if torch.version.cuda is None:  # CPU-only torch wheels define placeholder torch.cuda classes
        pytest.skip("torch is a CPU-only build: its torch.cuda.Stream/Event are placeholders")
    names = [f"{owner}.{name}" for owner, names in USED_ON_OBJECTS.items() for name in names]
    missing = [f"{n} ({first_missing(n)} is missing)" for n in names if first_missing(n) is not None]
    assert not missing, "attributes the package uses that the installed libraries lack:\n" + "\n".join(missing)


def test_the_object_check_can_fail():
    assert first_missing("cupy.cuda.runtime.PointerAttributes.hostGetDevicePointer") == "cupy.cuda.runtime.PointerAttributes.hostGetDevicePointer"
    assert first_missing("torch.cuda.Event.no_such_method") == "torch.cuda.Event.no_such_method"
    assert first_missing("cupy.no_such_module.x") == "cupy.no_such_module"

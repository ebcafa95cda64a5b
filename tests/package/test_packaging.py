"""An installed (non-editable) wheel carries the CUDA sources and finds them."""

import os
import re
import zipfile
from pathlib import Path

import pytest
from conftest import REPO
from script_runs import assert_runs_without, run_python


def test_every_package_folder_is_listed_for_the_wheel():
    """pyproject lists the packages by name (kernels/ maps into one of them): a folder added to the
    package and not to the list would be missing from every installed wheel."""
    import tomllib

    listed = set(tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]["packages"])
    folders = {".".join(p.parent.relative_to(REPO).parts) for p in (REPO / "dgl_zerocopy").rglob("__init__.py")}
    assert folders - listed == set(), f"add {sorted(folders - listed)} to [tool.setuptools] packages in pyproject.toml"


@pytest.mark.slow
def test_wheel_ships_kernels_and_finds_them(tmp_path):
    build = run_python("-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", tmp_path / "dist", REPO)
    assert build.returncode == 0, build.stderr
    (wheel,) = (tmp_path / "dist").glob("dgl_zerocopy-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "dgl_zerocopy/kernels/gather.cu" in names
    assert {"dgl_zerocopy/kernels/sample.cu", "dgl_zerocopy/kernels/sample_rng.cuh", "dgl_zerocopy/cuda/sampling/launcher.py"} <= set(names)
    assert "dgl_zerocopy_graphbolt.pth" in names and "_dgl_zerocopy_graphbolt.py" in names
    shipped = {name.rsplit("/", 1)[0] for name in names if name.endswith("/__init__.py")}
    assert shipped >= {str(p.parent.relative_to(REPO)) for p in (REPO / "dgl_zerocopy").rglob("__init__.py")}, "a package folder left out"

    target = tmp_path / "site"
    install = run_python("-m", "pip", "install", "--no-deps", "-q", "--target", target, wheel)
    assert install.returncode == 0, install.stderr
    env = {**os.environ, "PYTHONPATH": str(target)}
    code = "from dgl_zerocopy.cuda.kernel_source import kernel_dir, read_kernel; print(kernel_dir()); print(len(read_kernel('gather.cu')))"
    probe = run_python("-c", code, cwd=tmp_path, env=env, timeout=120)
    assert probe.returncode == 0, probe.stderr
    where, size = probe.stdout.split()
    assert where.startswith(str(target)), f"kernels found at {where}, not in the installed package"
    assert int(size) > 100

    # Python runs the wheel's .pth at start-up (site.addsitedir does what site-packages gets): the hook is
    # in place and nothing heavy was imported.
    code = (
        "import site, sys; site.addsitedir(sys.argv[1])\n"
        "print(sum(type(f).__name__ == '_Finder' for f in sys.meta_path), [m for m in ('torch', 'dgl', 'numpy') if m in sys.modules])"
    )
    hooked = run_python("-c", code, target, cwd=tmp_path, env={**os.environ, "PYTHONPATH": ""}, timeout=120)
    assert hooked.returncode == 0, hooked.stderr
    assert hooked.stdout.split() == ["1", "[]"], hooked.stdout


@pytest.mark.slow
def test_editable_wheel_ships_the_hook_after_its_finder(tmp_path):
    """``pip install -e .`` builds this wheel (PEP 660). Python reads .pth files in name order: ours imports
    ``_dgl_zerocopy_graphbolt``, which the ``__editable__`` finder makes importable, so it must come later."""
    code = f"from setuptools import build_meta; print(build_meta.build_editable({str(tmp_path)!r}))"
    build = run_python("-c", code)
    assert build.returncode == 0, build.stderr
    wheel = tmp_path / build.stdout.split()[-1]
    archive = zipfile.ZipFile(wheel)
    pth_files = sorted(name for name in archive.namelist() if name.endswith(".pth"))
    assert len(pth_files) == 2 and pth_files[0].startswith("__editable__"), pth_files
    assert pth_files[1] == "dgl_zerocopy_graphbolt.pth"
    assert archive.read(pth_files[1]).decode().strip() == "import _dgl_zerocopy_graphbolt; _dgl_zerocopy_graphbolt.install()"


def test_the_documented_api_is_importable_without_dgl():
    """README and docs/usage.md use ``dgl_zerocopy.FeatureStore`` and ``dgl_zerocopy.DataLoader``;
    the GPU machine has no DGL, so importing the package must not need it."""

    code = (
        "import dgl_zerocopy\n"
        "assert {'FeatureStore', 'DataLoader'} <= set(dgl_zerocopy.__all__)\n"
        "from dgl_zerocopy import DataLoader, FeatureStore\n"
        "import dgl_zerocopy.nn, dgl_zerocopy.training.models\n"
    )
    assert_runs_without("dgl", code)


def test_the_readme_counts_no_tests_that_go_stale():
    """The README said the fast tier held 2,251 tests when it held 2,393: a count of the
    tiers goes stale with every test added, so the README says how to count them instead of a number."""
    import re

    readme = (REPO / "README.md").read_text(encoding="utf-8")
    tiers = readme[readme.index("`make test` (") : readme.index("`make lint`")]
    assert not re.search(r"\d[\d,]* tests", tiers), tiers
    assert "--collect-only -q | tail -1" in tiers


def test_the_docs_extra_builds_the_api_reference():
    """``make docs`` renders the docstrings with Sphinx: the docs extra declares it, ``make install`` installs
    that extra, both stacks pin it, and the build treats a warning as an error (CI runs it)."""
    import re
    import tomllib

    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    docs = project["optional-dependencies"]["docs"]
    assert any(re.match(r"sphinx\b", req, re.IGNORECASE) for req in docs), docs
    makefile = (REPO / "Makefile").read_text(encoding="utf-8")
    assert re.search(r'PIP_INSTALL\) -e "\.\[[^]]*\bdocs\b', makefile), "make install leaves out the docs extra"
    build = re.search(r"^docs: .*\n\t(.*)$", makefile, re.MULTILINE)
    assert build and "sphinx-build" in build.group(1) and "-W" in build.group(1).split(), build
    for stack in ("newest", "oldest"):
        pins = (REPO / "constraints" / f"{stack}.txt").read_text(encoding="utf-8").lower()
        assert re.search(r"^sphinx==", pins, re.MULTILINE), f"constraints/{stack}.txt pins no Sphinx"
    conf = (REPO / "docs" / "conf.py").read_text(encoding="utf-8")
    assert '"sphinx.ext.autodoc"' in conf and '"sphinx.ext.napoleon"' in conf
    assert "make docs" in (REPO / ".ci" / "run").read_text(encoding="utf-8")


#: Tracker numbers and words about how the work was arranged: the product's code and docs name neither.
WORKING_WORDS = re.compile(r"issue [0-9]|stop [0-9]|\blease|\blent\b", re.IGNORECASE)


def test_no_tracker_numbers_or_working_words_in_the_product():
    """Code, tests, docs and configs speak of the product only: the CHANGELOG may cite what changed, and
    bench/results/ holds what the tools wrote at the time."""
    suffixes = {".py", ".md", ".rst", ".yaml", ".toml", ".txt", ".cu", ".cuh", ".h", ".cfg", ".in"}
    skip_dirs = {".git", "build", "results", "__pycache__", ".pytest_cache", ".whl", ".snap"}
    found = []
    for folder, dirs, files in os.walk(REPO):
        dirs[:] = [d for d in dirs if d not in skip_dirs and not d.startswith(".venv") and not d.endswith(".egg-info")]
        for name in files:
            path = Path(folder) / name
            if path.suffix not in suffixes and name not in ("Makefile", "run") or path == REPO / "CHANGELOG.md":
                continue
            for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
                if WORKING_WORDS.search(line):
                    found.append(f"{path.relative_to(REPO)}:{number}: {line.strip()[:100]}")
    assert found == [], "\n".join(found)

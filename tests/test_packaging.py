"""An installed (non-editable) wheel carries the CUDA sources and finds them."""
import os
import subprocess
import sys
import zipfile

import pytest

from conftest import REPO


@pytest.mark.slow
def test_wheel_ships_kernels_and_finds_them(tmp_path):
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp_path / "dist"), str(REPO)],
        capture_output=True, text=True, encoding="utf-8", timeout=300,
    )
    assert build.returncode == 0, build.stderr
    (wheel,) = (tmp_path / "dist").glob("dgl_zerocopy-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "dgl_zerocopy/kernels/gather.cu" in names

    target = tmp_path / "site"
    install = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target), str(wheel)], capture_output=True, text=True, encoding="utf-8", timeout=300)
    assert install.returncode == 0, install.stderr
    env = {**os.environ, "PYTHONPATH": str(target)}
    probe = subprocess.run(
        [sys.executable, "-c", "from dgl_zerocopy.kernel_source import kernel_dir, read_kernel; print(kernel_dir()); print(len(read_kernel('gather.cu')))"],
        capture_output=True, text=True, encoding="utf-8", cwd=tmp_path, env=env, timeout=120,
    )
    assert probe.returncode == 0, probe.stderr
    where, size = probe.stdout.split()
    assert where.startswith(str(target)), f"kernels found at {where}, not in the installed package"
    assert int(size) > 100


def test_the_documented_api_is_importable_without_dgl():
    """README and docs/usage.md use ``dgl_zerocopy.FeatureStore`` and ``dgl_zerocopy.DataLoader``;
    the GPU machine has no DGL, so importing the package must not need it."""
    import subprocess
    import sys

    code = ("import sys; sys.modules['dgl'] = None\n"
            "import dgl_zerocopy\n"
            "assert {'FeatureStore', 'DataLoader'} <= set(dgl_zerocopy.__all__)\n"
            "from dgl_zerocopy import DataLoader, FeatureStore\n"
            "import dgl_zerocopy.nn, dgl_zerocopy.models\n")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, encoding="utf-8")
    assert run.returncode == 0, run.stderr

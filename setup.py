"""The one build step pyproject.toml cannot express: ship ``dgl_zerocopy_graphbolt.pth``.

Python runs the ``import`` line of a ``.pth`` file in site-packages at start-up. This one installs
the graphbolt import hook (``_dgl_zerocopy_graphbolt``, which imports nothing heavy), so that a
script whose first line is ``import dgl`` works on a torch for which DGL 2.1 ships no graphbolt
library. A wheel's root goes to site-packages, so the file is put there, in both kinds of wheel:
- a regular wheel (``pip install .``): the root is ``build_lib``;
- an editable wheel (``pip install -e .``): setuptools (>= 64) points ``install_lib`` at the root of
  the wheel it is packing, the place it also writes its own ``__editable__.*.pth``. Ours is named so
  that it sorts after that one, whose finder is what makes ``_dgl_zerocopy_graphbolt`` importable.
"""

from __future__ import annotations

import os

from setuptools import setup
from setuptools.command.build_py import build_py

HOOK_PTH = "dgl_zerocopy_graphbolt.pth"


class BuildPyWithHook(build_py):
    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            root = self.get_finalized_command("install").install_lib
        else:
            root = self.build_lib
        self.copy_file(HOOK_PTH, os.path.join(root, HOOK_PTH), preserve_mode=False)

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:
        return [*super().get_outputs(include_bytecode), os.path.join(self.build_lib, HOOK_PTH)]


setup(cmdclass={"build_py": BuildPyWithHook})

"""``make gpu-check`` and ``python3 bench/gpu_check.py``: the whole GPU path checked in one command.

The check lives in bench/gpu_check/ (gpu_check_main.py says what it runs, docs/gpu.md how to run it
on a GPU machine); this file only puts that folder on the path and runs it, so that the command is the
one the Makefile and the docs show.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "gpu_check"))
from gpu_check_main import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())

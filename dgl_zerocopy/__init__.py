"""dgl-zerocopy: GNN minibatch training with node features gathered straight from pinned host memory."""
import os

# DGL asks for a backend on first import and prints a notice; this package is PyTorch only.
os.environ.setdefault("DGLBACKEND", "pytorch")
# ogb checks PyPI for a newer release on import; machines without internet only get a warning.
os.environ.setdefault("OUTDATED_IGNORE", "1")

# DGL 2.1 has a graphbolt library only for torch 2.0-2.2.1; on a newer torch `import dgl` needs a placeholder.
import _dgl_zerocopy_graphbolt  # noqa: E402

_dgl_zerocopy_graphbolt.install()

from .loader import DataLoader  # noqa: E402
from .store import FeatureStore  # noqa: E402

__version__ = "0.1.0"
__all__ = ["DataLoader", "FeatureStore", "__version__"]

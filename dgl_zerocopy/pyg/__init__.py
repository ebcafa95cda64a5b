"""The PyG front end: PyG's loaders, sampling with our samplers and gathering with our store.

``from dgl_zerocopy.pyg import NeighborLoader, LinkNeighborLoader`` in place of ``torch_geometric.loader``'s:
the same arguments and batches, no pyg-lib or torch-sparse needed (docs/pyg.md). Needs
``pip install "dgl-zerocopy[pyg]"`` (torch-geometric from PyPI); DGL is not needed.

- :mod:`.sampler`: :class:`NeighborSampler`, PyG's sampler class with our picks (CPU and GPU).
- :mod:`.features`: the data's feature tables gathered by our store.
- :mod:`.loaders`: :class:`NeighborLoader`, :class:`LinkNeighborLoader`.
- :mod:`.stores`: :class:`FeatureStore` and :class:`GraphStore`, PyG's remote-backend interfaces over our
  store and CSC.
"""

from __future__ import annotations

try:
    import torch_geometric  # noqa: F401
except ImportError as error:  # one clear line instead of a traceback from deep inside
    raise ImportError(f'dgl_zerocopy.pyg needs torch-geometric ({error}); install it with: pip install "dgl-zerocopy[pyg]"') from error

from .loaders import LinkNeighborLoader, NeighborLoader
from .sampler import NeighborSampler
from .stores import FeatureStore, GraphStore

__all__ = ["FeatureStore", "GraphStore", "LinkNeighborLoader", "NeighborLoader", "NeighborSampler"]

"""The neighbour-sampling kernels (``kernels/sample.cu``), beside :mod:`..gather`.

- :mod:`.api`: ``sample_csc`` and ``SampledCSC``, the entry point, its checks and backends; and its
  two halves without a host read, ``plan_csc`` and ``sample_csc_deferred`` (``CSCPlan``, ``DeferredCSC``);
  ``relabel_layer``: a layer's ``to_block`` numbering by a device hash table, no host read.
- :mod:`.rng`: the counter-based RNG in NumPy, the kernel's ``sample_rng.cuh`` bit for bit.
- :mod:`.reference`: the algorithm in NumPy (backend ``"reference"``).
- :mod:`.instantiations`, :mod:`.launch`: template arguments, launch plan (GPU and emulator alike).
- :mod:`.launcher`: the CuPy launcher (backend ``"cuda"``); :mod:`.emulator`: the g++ build run on
  the CPU (backend ``"emulator"``); :mod:`.pcie_model`: link requests and bytes per sampled edge.
- :mod:`.op_count`: device operations and host synchronisations of a block of code, counted.

Importing this package imports no CuPy.
"""

from dgl_zerocopy.cuda.sampling.api import BACKENDS, CSCPlan, DeferredCSC, Relabelled, SampledCSC, plan_csc, relabel_layer, sample_csc, sample_csc_deferred

__all__ = ["BACKENDS", "CSCPlan", "DeferredCSC", "Relabelled", "SampledCSC", "plan_csc", "relabel_layer", "sample_csc", "sample_csc_deferred"]

"""The GPU kernel layer: CUDA kernels, how they are compiled and launched, and their CPU twins.

The kernel sources stay in the repository's ``kernels/`` folder (shipped as
``dgl_zerocopy.kernels``). Here:

- :mod:`.kernel_source`: finds ``kernels/`` and holds the compile options every kernel shares.
- :mod:`.nvrtc`: NVRTC lookup and compilation through ctypes (no GPU, no CuPy needed).
- :mod:`.gather`: the feature-row gather: its launch plan, CuPy launcher, CPU emulator and PCIe
  model, one place per kernel.
- :mod:`.sampling`: the neighbour-sampling kernels (``sample_csc``), with the same four parts and
  a NumPy reference.

This layer imports nothing else of the package: the store, loading and training build on it.
Importing it imports no CuPy and needs no GPU.
"""

"""The gather kernel (``kernels/gather.cu``): everything that knows its launch geometry.

- :mod:`.gather_plan`: the launch plan (grid, block, kernel name, arguments), shared by GPU and CPU.
- :mod:`.launcher`: the CuPy launcher (``launch_gather``, ``launch_decode``, ``DeviceCache``).
- :mod:`.emulator`: the CPU twin: the same ``.cu`` compiled by g++, run on the same plan.
- :mod:`.pcie_model`: the PCIe traffic model of the traces the emulator records.
"""

"""The device blocks the loader hands out, under the loading layer's name.

The types live in :mod:`dgl_zerocopy.sampling.blocks`, in the sampling layer that builds them and
below this one, so that sampling never imports loading. This module re-exports them: an import
from ``dgl_zerocopy.loading.blocks`` gives the very same objects.
"""

from ..sampling.blocks import EID, ID_DTYPES, NID, Device, DeviceBlock, HeteroDeviceBlock, as_device_block

__all__ = ["EID", "ID_DTYPES", "NID", "Device", "DeviceBlock", "HeteroDeviceBlock", "as_device_block"]

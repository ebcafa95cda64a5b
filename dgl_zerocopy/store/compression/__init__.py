"""Compressed host features: codecs and their reference decode (``codec.py``), the chunked
encoders (``encode.py``), compressed tables in memory and on disk (``table.py``), and the torch
decode the cpu and gpu backends run (``decode.py``)."""

from .codec import CODECS, Codec, check_codec_name
from .encode import DEFAULT_AXIS, DEFAULT_METHOD, INT8_METHODS
from .table import CompressedTable, DamagedTableError, compress, compressed_beside, is_compressed_dir
from .table import load as load_compressed

__all__ = [
    "CODECS",
    "Codec",
    "check_codec_name",
    "CompressedTable",
    "DamagedTableError",
    "compress",
    "compressed_beside",
    "is_compressed_dir",
    "load_compressed",
    "DEFAULT_AXIS",
    "DEFAULT_METHOD",
    "INT8_METHODS",
]

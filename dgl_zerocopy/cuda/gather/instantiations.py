"""The instantiations of the gather kernels (``kernels/gather.cu``): their template parameters (load
width, id width, code and output formats) and their names, which NVRTC compiles and the launcher
and the CPU emulator look up. Pure Python.
"""

from __future__ import annotations

__all__ = ["CODE_FORMATS", "ID_TYPES", "IDENTITY", "LOAD_TYPES", "OUT_FORMATS", "VARIANTS", "all_name_expressions", "decode_name_expression", "name_expression"]

VARIANTS = ("aligned", "naive")
#: CUDA type of each load width. The kernels copy bytes, so the element type does not matter.
LOAD_TYPES = {16: "uint4", 8: "uint2", 4: "unsigned int", 2: "unsigned short", 1: "unsigned char"}
#: CUDA type of each id width (int32 and int64 ids).
ID_TYPES = {4: "int", 8: "long long"}
#: Compressed code formats (the codec names of ``dgl_zerocopy.store.compression``): their tag type in
#: ``kernels/codecs.cuh`` and bytes per code.
CODE_FORMATS = {"fp16": ("zc_fp16", 2), "bf16": ("zc_bf16", 2), "int8": ("zc_int8", 1)}
#: Output element formats of the decoding gather (torch dtype names), with tag type and bytes.
OUT_FORMATS = {"float32": ("zc_f32", 4), "float16": ("zc_fp16", 2), "bfloat16": ("zc_bf16", 2)}
#: Code and output formats whose decode is the identity: the raw gather copies them.
IDENTITY = {("fp16", "float16"), ("bf16", "bfloat16")}


def name_expression(variant: str, load_bytes: int, id_bytes: int) -> str:
    """The kernel instantiation for ``variant`` with ``load_bytes`` loads and ``id_bytes`` ids."""
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {VARIANTS}, but got {variant!r}")
    if load_bytes not in LOAD_TYPES:
        raise ValueError(f"load_bytes must be one of {sorted(LOAD_TYPES)}, but got {load_bytes}")
    if id_bytes not in ID_TYPES:
        raise ValueError(f"id_bytes must be 4 (int32) or 8 (int64), but got {id_bytes}")
    return f"gather_{variant}<{LOAD_TYPES[load_bytes]}, {ID_TYPES[id_bytes]}>"


def decode_name_expression(code: str, out_format: str, load_bytes: int) -> str:
    """The decoding gather instantiation for ``code`` rows read with ``load_bytes`` loads and
    written as ``out_format``, e.g. ``"gather_decode<zc_int8, zc_f32, uint4>"``. (The id width is
    a kernel argument, not a template parameter: see ``kernels/gather.cu``.)"""
    if code not in CODE_FORMATS:
        raise ValueError(f"code must be one of {tuple(CODE_FORMATS)}, but got {code!r}")
    if out_format not in OUT_FORMATS:
        raise ValueError(f"out_format must be one of {tuple(OUT_FORMATS)}, but got {out_format!r}")
    if (code, out_format) in IDENTITY:
        raise ValueError(f"{code} codes written as {out_format} are copied by gather_aligned, not decoded")
    if load_bytes not in LOAD_TYPES or load_bytes < CODE_FORMATS[code][1]:
        widths = [w for w in sorted(LOAD_TYPES) if w >= CODE_FORMATS[code][1]]
        raise ValueError(f"load_bytes for {code} codes must be one of {widths}, but got {load_bytes}")
    return f"gather_decode<{CODE_FORMATS[code][0]}, {OUT_FORMATS[out_format][0]}, {LOAD_TYPES[load_bytes]}>"


def all_name_expressions() -> tuple[str, ...]:
    """Every instantiation the launcher may use (compiled together into one module): the raw
    gathers (both variants, every load width, both id widths), then the decoding gathers (every
    code and output format but the identities, every load width a code allows, both id widths)."""
    raw = tuple(
        name_expression(variant, load_bytes, id_bytes)
        for variant in VARIANTS
        for load_bytes in sorted(LOAD_TYPES, reverse=True)
        for id_bytes in sorted(ID_TYPES)
    )
    decode = tuple(
        decode_name_expression(code, out_format, load_bytes)
        for code, (_, code_bytes) in CODE_FORMATS.items()
        for out_format in OUT_FORMATS
        if (code, out_format) not in IDENTITY
        for load_bytes in sorted(LOAD_TYPES, reverse=True)
        if load_bytes >= code_bytes
    )
    return raw + decode

"""GGUF format conversion with `gguf` (gguf-py): dequantize to F16, requantize to simple types.

The paper's controls need the same weights in other storage formats (e.g. Q4_K_M weights stored as
F16). `dequantize_to_f16` and `requantize` rewrite a GGUF file tensor by tensor: the source is
memory-mapped and each tensor is converted in row chunks, so at most one output tensor is held in
memory. Every metadata key is copied; `general.file_type` is set to the new type. 1-D tensors (norm
vectors, biases) are stored F32. Values always pass through F16 on the way, so
`requantize(src, ..)` gives the same file as `requantize(dequantize_to_f16(src), ..)`.

gguf-py can quantize only F16/BF16/Q8_0/Q4_0/Q4_1/Q5_0/Q5_1; K-quants need llama.cpp's
`llama-quantize`. Each produced file is read back with `GGUFReader` and checked (tensor names,
shapes, types, metadata keys) before it replaces `dst`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from kit.core.errors import ConfigError, KitError
from kit.models.hashing import sha256_file
from kit.core.atomic_file import publish, staging_path
from kit.models.progress import Progress, report

CHUNK_ELEMENTS = 8 * 1024 * 1024
"""Weights converted per step (32 MiB of float32), bounding the working memory."""

QUANTIZE_TARGETS = ("F16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1")
"""Formats this module can write."""

_K_QUANT_HINT = ("K-quants (Q2_K … Q6_K, Q3_K_M, Q4_K_M, …) cannot be produced with gguf-py",
                 "use llama.cpp's llama-quantize for those, or choose one of: " + ", ".join(QUANTIZE_TARGETS))


@dataclass(frozen=True)
class TensorPlan:
    """How one tensor is written: its name, ggml shape (ne0 first), source and output types."""

    name: str
    shape: tuple[int, ...]
    src_type: int  # a gguf.GGMLQuantizationType (gguf is imported lazily)
    out_type: int

    @property
    def n_elements(self) -> int:
        return int(np.prod(self.shape))


def _gguf():
    try:
        import gguf  # noqa: PLC0415 - gguf is optional until a conversion asks for it
    except ImportError:
        raise KitError("the gguf package is not installed", "pip install gguf==0.19.0") from None
    return gguf


def open_gguf(path: Path):
    """A `gguf.GGUFReader` for `path` that parses about twice as fast.

    The stock reader slices an `np.memmap`, whose Python-level hooks run for each of the ~10^6
    small slices a large vocabulary needs. This subclass stores a plain ndarray view of the same
    memory map instead: same bytes, still read lazily from disk.
    """
    _gguf()  # the kit's one-line error where gguf is missing
    from gguf import GGUFReader  # noqa: PLC0415 - gguf is optional until a conversion asks for it

    class _PlainViewReader(GGUFReader):
        @property
        def data(self):
            return self._plain_data

        @data.setter
        def data(self, value):
            self._plain_data = value.view(np.ndarray) if isinstance(value, np.memmap) else value

    return _PlainViewReader(path)


def target_types(target: str):
    """(tensor type, llama file type) for a target format name; a clear error for what gguf can't make."""
    gguf = _gguf()
    name = target.upper()
    if name not in QUANTIZE_TARGETS:
        if "_K" in name or name.startswith("IQ"):
            raise KitError(f"cannot quantize to {target}: {_K_QUANT_HINT[0]}", _K_QUANT_HINT[1])
        raise ConfigError(f"unknown target format {target!r}", f"choose one of: {', '.join(QUANTIZE_TARGETS)}")
    return gguf.GGMLQuantizationType[name], gguf.LlamaFileType[f"MOSTLY_{name}"]


def _integer_types() -> frozenset:
    T = _gguf().GGMLQuantizationType
    return frozenset({T.I8, T.I16, T.I32, T.I64})


def plan_tensors(reader, out_type) -> list[TensorPlan]:
    """Decide each tensor's output type: 1-D → F32, integer tensors kept, rows the block size
    does not divide → F16, everything else → `out_type`."""
    gguf = _gguf()
    T = gguf.GGMLQuantizationType
    plans = []
    for tensor in reader.tensors:
        shape = tuple(int(n) for n in tensor.shape)
        src = tensor.tensor_type
        if src in _integer_types():
            out = src  # integer tensors (I8/I16/I32/...) are copied untouched
        elif len(shape) <= 1:
            out = T.F32
        else:
            block, _ = gguf.GGML_QUANT_SIZES[out_type]
            out = out_type if shape[0] % block == 0 else T.F16
        plans.append(TensorPlan(tensor.name, shape, src, out))
    return plans


def _rows(tensor) -> np.ndarray:
    """The tensor's stored data as a 2-D array with one row of ne0 weights per line."""
    data = tensor.data
    return data.reshape(-1, data.shape[-1]) if data.ndim > 1 else data.reshape(1, -1)


def _convert(tensor, plan: TensorPlan) -> np.ndarray:
    """The tensor in its output type, converted in row chunks; shape is numpy order (ne0 last)."""
    gguf = _gguf()
    T = gguf.GGMLQuantizationType
    numpy_shape = tuple(reversed(plan.shape)) if plan.shape else (1,)
    if plan.src_type in _integer_types():
        return np.array(tensor.data).reshape(numpy_shape)  # copied bit for bit
    rows = _rows(tensor)
    ne0 = plan.shape[0] if plan.shape else 1
    n_rows = plan.n_elements // ne0
    block, type_size = gguf.GGML_QUANT_SIZES[plan.out_type]
    if plan.out_type in (T.F32, T.F16):
        out = np.empty((n_rows, ne0), dtype=np.float32 if plan.out_type == T.F32 else np.float16)
    else:
        out = np.empty((n_rows, ne0 // block * type_size), dtype=np.uint8)
    step = max(1, CHUNK_ELEMENTS // ne0)
    for start in range(0, n_rows, step):
        part = gguf.quants.dequantize(np.asarray(rows[start:start + step]), plan.src_type)
        part = part.reshape(-1, ne0)
        if plan.out_type == T.F32:
            out[start:start + step] = part
        else:
            halves = part.astype(np.float16)  # every non-F32 output passes through F16
            if plan.out_type == T.F16:
                out[start:start + step] = halves
            else:
                out[start:start + step] = gguf.quants.quantize(halves.astype(np.float32), plan.out_type)
    if plan.out_type in (T.F32, T.F16):
        return out.reshape(numpy_shape)
    return out.reshape(numpy_shape[:-1] + (out.shape[-1],))


def _copy_metadata(reader, writer, file_type: int) -> list[str]:
    """Copy every key of `reader` into `writer`, replacing general.file_type; returns the keys."""
    gguf = _gguf()
    V = gguf.GGUFValueType
    keys: list[str] = []
    wrote_file_type = False
    for key, field in reader.fields.items():
        if key.startswith("GGUF."):
            continue  # header pseudo-fields (version, counts) are written by the writer
        keys.append(key)
        if key == gguf.Keys.General.ARCHITECTURE:
            continue  # the writer adds it from its `arch` argument
        if key == gguf.Keys.General.FILE_TYPE:
            writer.add_key_value(key, int(file_type), V.UINT32)
            wrote_file_type = True
            continue
        if key == gguf.Keys.General.ALIGNMENT:
            writer.add_custom_alignment(int(field.contents()))
            continue
        main = field.types[0]
        if main == V.ARRAY:
            if len(field.types) != 2:
                raise KitError(f"metadata key {key} is a nested array, which this converter does not copy",
                               "report the model file")
            writer.add_key_value(key, field.contents(), V.ARRAY, sub_type=field.types[1])
        else:
            writer.add_key_value(key, field.contents(), main)
    if not wrote_file_type:
        writer.add_key_value(gguf.Keys.General.FILE_TYPE, int(file_type), V.UINT32)
        keys.append(gguf.Keys.General.FILE_TYPE)
    return keys


def _check_written(path: Path, plans: list[TensorPlan], keys: list[str], file_type: int) -> None:
    """Read the new file back and confirm tensors (names, shapes, types) and metadata keys."""
    gguf = _gguf()
    reader = open_gguf(path)
    got = [(t.name, tuple(int(n) for n in t.shape), t.tensor_type) for t in reader.tensors]
    want = [(p.name, p.shape, p.out_type) for p in plans]
    if got != want:
        bad = next((w, g) for w, g in zip(want, got + [None] * len(want)) if w != g)
        raise KitError(f"converted file {path.name} does not read back as planned: expected {bad[0]}, got {bad[1]}",
                       "report this with the source model")
    missing = [k for k in keys if k not in reader.fields]
    if missing:
        raise KitError(f"converted file {path.name} lost metadata keys: {', '.join(missing)}", "report this")
    if reader.fields[gguf.Keys.General.FILE_TYPE].contents() != int(file_type):
        raise KitError(f"converted file {path.name} has the wrong general.file_type", "report this")


def convert(src: Path, dst: Path, target: str, progress: Progress | None = None, verify: bool = True) -> str:
    """Rewrite GGUF `src` as `dst` in format `target` (see module doc); returns dst's sha256.

    `verify` reads the result back before it replaces `dst` (a few seconds for a big vocabulary);
    leave it on unless the caller reads the file back itself.
    """
    gguf = _gguf()
    src, dst = Path(src), Path(dst)
    out_type, file_type = target_types(target)
    if src.resolve() == dst.resolve():
        raise ConfigError(f"source and destination are the same file ({src})", "choose another output path")
    try:
        reader = open_gguf(src)
    except (OSError, ValueError) as err:
        raise ConfigError(f"cannot read GGUF file {src}: {err}", "pass a valid .gguf model file") from None
    arch_field = reader.fields.get(gguf.Keys.General.ARCHITECTURE)
    if arch_field is None:
        raise ConfigError(f"{src} has no general.architecture key", "pass a model GGUF file")
    plans = plan_tensors(reader, out_type)

    staging = staging_path(dst.parent, dst.name)
    try:
        writer = gguf.GGUFWriter(staging, arch=arch_field.contents())
        keys = _copy_metadata(reader, writer, file_type)
        for plan in plans:
            block, type_size = gguf.GGML_QUANT_SIZES[plan.out_type]
            nbytes = plan.n_elements // block * type_size
            numpy_shape = tuple(reversed(plan.shape))
            writer.add_tensor_info(plan.name, numpy_shape, np.dtype(np.float32), nbytes, raw_dtype=plan.out_type)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_ti_data_to_file()
        for index, (tensor, plan) in enumerate(zip(reader.tensors, plans)):
            writer.write_tensor_data(_convert(tensor, plan))
            report(progress, "convert", f"{src.name} → {target.upper()}", index + 1, len(plans))
        writer.close()
        if verify:
            _check_written(staging, plans, keys, file_type)
        publish(staging, dst)
    except BaseException:
        staging.unlink(missing_ok=True)
        raise
    return sha256_file(dst)


def dequantize_to_f16(src: Path, dst: Path, progress: Progress | None = None, verify: bool = True) -> str:
    """Store every weight matrix of `src` as F16 (1-D tensors F32) in `dst`; returns dst's sha256."""
    return convert(src, dst, "F16", progress, verify)


def requantize(src_f16: Path, dst: Path, target: str, progress: Progress | None = None,
               verify: bool = True) -> str:
    """Quantize `src_f16` to Q8_0/Q4_0/Q4_1/Q5_0/Q5_1 in `dst`; returns dst's sha256.

    Any GGUF is accepted as source; its weights pass through F16 first. K-quants raise KitError.
    """
    if target.upper() == "F16":
        raise ConfigError("requantize targets a quantized format", "use dequantize_to_f16 for F16")
    return convert(src_f16, dst, target, progress, verify)

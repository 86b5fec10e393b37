"""Reading IDX files (the format MNIST ships in), raw or gzip-compressed, with header checks.

An IDX file is a 4-byte magic number (two zero bytes, a type code, the number of dims),
one big-endian uint32 per dim, then the values. MNIST uses unsigned bytes only (type 0x08):
magic 2051 for images (3 dims) and 2049 for labels (1 dim).
"""

from __future__ import annotations

import gzip
import struct
import zlib
from pathlib import Path

import torch

from modelforge.errors import DataError

IMAGES_MAGIC = 2051
LABELS_MAGIC = 2049
_UBYTE = 0x08


def read_idx_bytes(path: str | Path) -> bytes:
    """The uncompressed bytes of ``path``: gunzipped when its name ends in ``.gz``."""
    path = Path(path)
    packed = read_file_bytes(path)
    return gunzip(packed, where=path) if path.suffix == ".gz" else packed


def read_file_bytes(path: Path) -> bytes:
    """The bytes of ``path`` as stored; a :class:`DataError` when it cannot be read."""
    try:
        return path.read_bytes()
    except OSError as e:
        raise DataError(f"{path}: cannot be read ({e.strerror or e})") from e


def gunzip(packed: bytes, *, where: str | Path) -> bytes:
    """The uncompressed bytes of a gzip file's contents; a :class:`DataError` naming ``where`` if corrupt."""
    try:
        return gzip.decompress(packed)
    except (EOFError, zlib.error, gzip.BadGzipFile) as e:
        # EOFError: the compressed stream was cut off; BadGzipFile: not gzip at all.
        raise DataError(f"{where}: corrupt gzip ({e}); delete it so that it can be fetched again") from e


def idx_dims(data: bytes, *, magic: int, where: str = "IDX data") -> tuple[int, ...]:
    """Check the header of ``data`` against ``magic`` and the length, and return its dims.

    Raises:
        DataError: naming ``where`` when the magic number is wrong or the length
            does not match what the header announces.
    """
    if len(data) < 4:
        raise DataError(f"{where}: truncated: {len(data)} bytes, too short for an IDX header")
    found = struct.unpack(">I", data[:4])[0]
    if found != magic:
        raise DataError(
            f"{where}: wrong magic number {found} (0x{found:08x}), expected {magic} (0x{magic:08x}); "
            f"this is not an MNIST {_kind(magic)} file"
        )
    ndim = magic & 0xFF
    header = 4 + 4 * ndim
    if len(data) < header:
        raise DataError(f"{where}: truncated: expected at least {header} header bytes, found {len(data)}")
    dims = struct.unpack(f">{ndim}I", data[4:header])
    expected = header + _prod(dims)
    if len(data) < expected:
        raise DataError(f"{where}: truncated: expected {expected} bytes for dims {list(dims)}, found {len(data)}")
    if len(data) > expected:
        raise DataError(f"{where}: too long: expected {expected} bytes for dims {list(dims)}, found {len(data)}")
    return dims


def parse_idx(data: bytes, *, magic: int, where: str = "IDX data") -> torch.Tensor:
    """A uint8 tensor of the dims in the header of ``data`` (checked as in :func:`idx_dims`)."""
    if (magic >> 8) != _UBYTE:
        raise ValueError(f"only unsigned-byte IDX files are supported, not magic {magic}")
    dims = idx_dims(data, magic=magic, where=where)
    header = 4 + 4 * len(dims)
    # bytearray: torch.frombuffer warns on read-only buffers; one copy is cheap next to gunzip.
    payload = bytearray(memoryview(data)[header:])
    if not payload:  # torch.frombuffer refuses an empty buffer
        return torch.empty(dims, dtype=torch.uint8)
    return torch.frombuffer(payload, dtype=torch.uint8).reshape(dims)


def _kind(magic: int) -> str:
    return {IMAGES_MAGIC: "images", LABELS_MAGIC: "labels"}.get(magic, f"magic-{magic}")


def _prod(dims: tuple[int, ...]) -> int:
    n = 1
    for d in dims:
        n *= d
    return n

"""What is wrong with a model file that does not load, in words a user can act on: empty, cut short, or another
kind of file than its name says. Checkpoints, ``.pt2`` and TorchScript files are zip archives; ONNX files are
protobuf messages. Torch's and protobuf's own reasons for such files (``(101)``, ``[Errno 22] Invalid argument``,
``Error parsing message``) say neither.
"""

from __future__ import annotations

import zipfile
from pathlib import Path

ZIP_MAGIC = b"PK\x03\x04"  # every zip archive starts with a local file header
PICKLE_MAGIC = b"\x80"  # pickle protocol 2 and later: torch.save's legacy format, pickle.dump
ONNX_MAGIC = b"\x08"  # an ONNX ModelProto starts with field 1, ir_version, a varint
HEAD = 64  # bytes looked at to tell text from binary


def zip_damage(path: Path, kind: str) -> str | None:
    """Why ``path``, meant to be a ``kind`` written as a zip archive, is not one ("is empty", "is truncated ...");
    None when it is a whole zip archive, or a pickle (torch reads those too, and says what is wrong with them)."""
    size, head = _head(path)
    if size == 0:
        return "is empty (0 bytes)"
    if head.startswith(ZIP_MAGIC):
        return None if zipfile.is_zipfile(path) else \
            f"is truncated or damaged: a zip archive without its end ({size:,} bytes)"
    if head.startswith(PICKLE_MAGIC):
        return None
    return f"is truncated or not a {kind} (a zip archive was expected; {_looks_like(head)})"


def onnx_damage(path: Path) -> str:
    """Why onnx could not parse ``path``: empty, another kind of file, or (a protobuf cut short) truncated."""
    size, head = _head(path)
    if size == 0:
        return "is empty (0 bytes)"
    if head.startswith((ZIP_MAGIC, PICKLE_MAGIC)):
        return f"is not an ONNX model ({_looks_like(head)})"
    if head.startswith(ONNX_MAGIC):
        return f"is truncated or damaged: onnx cannot parse its {size:,} bytes, which begin as an ONNX model's do"
    return f"is truncated or not an ONNX model (onnx cannot parse its {size:,} bytes; {_looks_like(head)})"


def _head(path: Path) -> tuple[int, bytes]:
    with path.open("rb") as handle:
        return path.stat().st_size, handle.read(HEAD)


def _looks_like(head: bytes) -> str:
    if head.startswith(ZIP_MAGIC):
        return "it is a zip archive, as PyTorch checkpoints, .pt2 and TorchScript files are"
    if head.startswith(PICKLE_MAGIC):
        return "it is a Python pickle, as torch.save's legacy format is"
    text = head.decode("utf-8", "ignore")  # a character cut at HEAD bytes is dropped, nothing more
    if len(text.encode()) >= len(head) - 3 and all(c.isprintable() or c in "\t\r\n" for c in text):
        line = text.strip().splitlines()[0] if text.strip() else ""
        return f"it begins with text: {line[:40]!r}"
    return f"it begins with bytes {head[:8].hex(' ')}"

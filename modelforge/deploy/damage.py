"""What is wrong with a model file that does not load, in words a user can act on: empty, cut short, or another
kind of file than its name says. Checkpoints, ``.pt2`` and TorchScript files are zip archives; ONNX files are
protobuf messages. Torch's and protobuf's own reasons for such files (``(101)``, ``[Errno 22] Invalid argument``,
``Error parsing message``) say neither.
"""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

ZIP_MAGIC = b"PK\x03\x04"  # every zip archive starts with a local file header
PICKLE_MAGIC = b"\x80"  # pickle protocol 2 and later: torch.save's legacy format, pickle.dump
ONNX_MAGIC = b"\x08"  # an ONNX ModelProto starts with field 1, ir_version, a varint
HEAD = 64  # bytes looked at to tell text from binary
PT2, TORCHSCRIPT, CHECKPOINT = "torch.export program", "TorchScript file", "torch.save checkpoint"


def zip_damage(path: Path, kind: str, data: bytes | None = None) -> str | None:
    """Why ``path``, meant to be a ``kind`` written as a zip archive, is not one ("is empty", "is truncated ...");
    None when it is a whole zip archive, or a pickle (torch reads those too, and says what is wrong with them).
    ``data``: the file's bytes, where the caller read them (then the file is not opened again)."""
    size, head = _head(path, data)
    if size == 0:
        return "is empty (0 bytes)"
    if head.startswith(ZIP_MAGIC):
        return None if zipfile.is_zipfile(io.BytesIO(data) if data is not None else path) else \
            f"is truncated or damaged: a zip archive without its end ({size:,} bytes)"
    if head.startswith(PICKLE_MAGIC):
        return None
    return f"is truncated or not a {kind} (a zip archive was expected; {_looks_like(head)})"


def onnx_damage(path: Path, data: bytes | None = None) -> str:
    """Why onnx could not parse ``path``: empty, another kind of file, or (a protobuf cut short) truncated."""
    size, head = _head(path, data)
    if size == 0:
        return "is empty (0 bytes)"
    if head.startswith((ZIP_MAGIC, PICKLE_MAGIC)):
        return f"is not an ONNX model ({_looks_like(head)})"
    if head.startswith(ONNX_MAGIC):
        return f"is truncated or damaged: onnx cannot parse its {size:,} bytes, which begin as an ONNX model's do"
    return f"is truncated or not an ONNX model (onnx cannot parse its {size:,} bytes; {_looks_like(head)})"


def zip_kind(names: list[str]) -> str:
    """What a zip archive of torch's is, from its members (below their one root folder): a ``torch.export``
    program (``archive_format``), a TorchScript file (``code/``, ``constants.pkl``), a ``torch.save`` checkpoint
    (``data.pkl``), or another zip archive."""
    root = names[0].split("/", 1)[0] + "/" if names else ""
    members = {name[len(root):] for name in names if name.startswith(root)}
    if "archive_format" in members:
        return PT2
    if "constants.pkl" in members or any(name.startswith("code/") for name in members):
        return TORCHSCRIPT
    if "data.pkl" in members:
        return CHECKPOINT
    return "zip archive of another kind"


def exported_kind(path: Path) -> str | None:
    """``PT2`` or ``TORCHSCRIPT`` when ``path`` is an exported model's zip archive, else None (without reading more
    than its member list)."""
    try:
        with path.open("rb") as handle:
            if handle.read(len(ZIP_MAGIC)) != ZIP_MAGIC:
                return None
            handle.seek(0)
            with zipfile.ZipFile(handle) as archive:
                found = zip_kind(archive.namelist())
    except (OSError, zipfile.BadZipFile, ValueError, EOFError):
        return None  # the loader says what is wrong with it
    return found if found in (PT2, TORCHSCRIPT) else None


def wrong_kind(found: str, wanted: str, suffix: str) -> str:
    """What to say of a file that is a ``found`` where a ``wanted`` was meant (its suffix says so)."""
    if wanted == CHECKPOINT:
        hint = (f"an exported model runs with `python -m modelforge predict ckpt_path=FILE`; load_model, eval and "
                "train take the checkpoint it was exported from")
    elif found == CHECKPOINT:
        hint = ("a checkpoint runs as ckpt_path=FILE.ckpt (or its run directory); `python -m modelforge export "
                "ckpt_path=FILE.ckpt` makes an exported model of it")
    elif found in (PT2, TORCHSCRIPT):
        hint = f"name it {'.pt2' if found == PT2 else '.pt'}, the suffix of its kind"
    else:
        hint = "export the model with `python -m modelforge export`"
    if wanted == CHECKPOINT:
        return f"is a {found}, not a checkpoint: {hint}"
    return f"is a {found}, not a {wanted} (the kind its {suffix} suffix names): {hint}"


def _head(path: Path, data: bytes | None = None) -> tuple[int, bytes]:
    if data is not None:
        return len(data), data[:HEAD]
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

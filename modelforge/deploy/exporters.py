"""The three exporters: each builds a model's program in memory (also how export probes the formats a model
can take), then saves it with its metadata inside, through an atomic write.
"""

from __future__ import annotations

import contextlib
import io
import logging
import re
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from modelforge.deploy.metadata import METADATA_KEY, ONNX_METADATA_KEY
from modelforge.errors import ExportError
from modelforge.files.atomic import write_bytes, write_to_path

_ANSI = re.compile(r"\x1b\[[0-9;]*m")


# --- the exporters: build in memory (also how the other formats are probed), then save -----------------------

def _batch_dims(dynamic_batch: bool) -> tuple[dict[int, Any], ...] | None:
    return ({0: torch.export.Dim("batch", min=1)},) if dynamic_batch else None


def _build_pt2(model: nn.Module, example: Tensor, *, dynamic_batch: bool, **_: Any) -> Any:
    with _quiet():
        return torch.export.export(model, (example,), dynamic_shapes=_batch_dims(dynamic_batch), strict=False)


def _build_onnx(model: nn.Module, example: Tensor, *, dynamic_batch: bool, opset: int | None, **_: Any) -> Any:
    with _quiet():
        return torch.onnx.export(model, (example,), dynamo=True, dynamic_shapes=_batch_dims(dynamic_batch),
                                 input_names=["images"], output_names=["logits"], opset_version=opset,
                                 verbose=False)


def _build_torchscript(model: nn.Module, example: Tensor, *, method: str, **_: Any) -> Any:
    with _quiet():
        if method == "trace":
            return torch.jit.trace(model, example)
        try:
            return torch.jit.script(model)
        except Exception as exc:  # noqa: BLE001 - TorchScript's compiler raises many kinds
            reason = _first_line(exc)
    raise ExportError(f"format torchscript: torch.jit.script cannot compile {type(model).__name__} ({reason}); "
                      "use method=trace (the default), which exports every modelforge model, graph models included")


# torch's zip writer (pt2, TorchScript) is serialized in memory, then written as bytes: writing to a file that
# fills up, it throws from its C++ destructor after the error it raised (PT2ArchiveWriter.__exit__ fails before
# close(); TorchScript's C++ writer unwinds unfinished), and an exception out of a destructor aborts the whole
# process (exit 134, "terminate called after ... unexpected pos"), a Python file handle or a path alike.

def _write_pt2(program: Any, path: Path, meta: str, renamed: Callable[[], None]) -> None:
    buffer = io.BytesIO()
    torch.export.save(program, buffer, extra_files={METADATA_KEY: meta})
    write_bytes(path, buffer.getbuffer(), renamed)


def _write_torchscript(module: Any, path: Path, meta: str, renamed: Callable[[], None]) -> None:
    buffer = io.BytesIO()
    with _quiet():
        torch.jit.save(module, buffer, _extra_files={METADATA_KEY: meta})
    write_bytes(path, buffer.getbuffer(), renamed)


def _write_onnx(program: Any, path: Path, meta: str, renamed: Callable[[], None]) -> None:
    """The ONNX program saves to a path only (a full disk is an OSError there): its weights' bytes are what
    a full disk's message says it needs."""
    program.model.metadata_props[ONNX_METADATA_KEY] = meta
    weights = sum(v.const_value.nbytes for v in program.model.graph.initializers.values() if v.const_value is not None)
    write_to_path(path, lambda temp: program.save(str(temp)), needed=weights or None, committed=renamed)


BUILDERS: dict[str, Callable[..., Any]] = {"pt2": _build_pt2, "onnx": _build_onnx, "torchscript": _build_torchscript}
WRITERS: dict[str, Callable[[Any, Path, str, Callable[[], None]], None]] = {"pt2": _write_pt2, "onnx": _write_onnx,
                                                        "torchscript": _write_torchscript}



@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Exporters print graphs, progress and deprecation notices: the user gets our lines (and errors) only."""
    loggers = [logging.getLogger(name) for name in ("torch", "onnx_ir", "onnxscript")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()), \
                contextlib.redirect_stderr(io.StringIO()):
            warnings.simplefilter("ignore")
            yield
    finally:
        for logger, level in zip(loggers, levels):
            logger.setLevel(level)



def _first_line(exc: BaseException) -> str:
    lines = [line.strip() for line in _ANSI.sub("", str(exc)).splitlines() if line.strip()]
    return (lines[0].rstrip(":") if lines else type(exc).__name__)[:300]

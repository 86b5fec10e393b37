"""What a TorchScript file or an ONNX model may hold before modelforge runs it.

A TorchScript archive is TorchScript source (``code/``) and pickles that torch's own unpickler reads, resolving
only TorchScript classes and tensors (a pickled ``os.system`` is refused by it). The source itself may call
any op of torch, and two of them reach the file system: ``torch.from_file`` (it creates the file it names when
``shared``) and ``torch.save``; a ``__setstate__`` runs them while the file loads. Those are refused before
``torch.jit.load`` reads the archive. An ONNX model runs no Python, but its weights may live in other files
(external data) that onnxruntime would read: a modelforge export holds its weights inside, so any is refused.
"""

from __future__ import annotations

import io
import re
import zipfile
import zlib
from collections.abc import Iterator
from typing import Any

# TorchScript source that reaches the file system: torch.from_file, torch.save, ops.aten.from_file,
# UntypedStorage.from_file (a module attribute of that name, self.nodes.save, is no call of torch's).
FILE_CALLS = re.compile(rb"\b(torch|ops\s*\.\s*\w+|\w*Storage)\s*\.\s*(from_file|save)\b")


def torchscript_refusal(data: bytes) -> str | None:
    """Why the TorchScript archive ``data`` is not loaded (its source calls a file op), else None."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            for info in archive.infolist():
                if "/code/" in info.filename and info.filename.endswith(".py"):
                    if found := FILE_CALLS.search(archive.read(info)):
                        name = info.filename.split("/", 1)[-1]
                        call = re.sub(r"\s+", "", found.group().decode())
                        return (f"holds TorchScript source that reaches the file system ({name} calls {call}): "
                                "refused unloaded")
    except (zipfile.BadZipFile, zlib.error, EOFError, ValueError) as exc:
        return f"is damaged: its zip archive does not read back ({exc})"
    return None


def onnx_refusal(model: Any) -> str | None:
    """Why the ONNX ModelProto ``model`` is not run (weights in other files), else None."""
    from onnx.external_data_helper import uses_external_data

    external = [t for t in _onnx_tensors(model) if uses_external_data(t)]
    if not external:
        return None
    place = next((e.value for e in external[0].external_data if e.key == "location"), "an unnamed file")
    return (f"keeps weights in other files ({len(external)} tensors, e.g. {external[0].name[:60]!r} in "
            f"{place[:80]!r}): modelforge's exports hold their weights inside; refused unread")


def _onnx_tensors(model: Any) -> Iterator[Any]:
    """Every tensor of an ONNX model: the graphs' initializers and the tensors in node attributes, subgraphs
    (an If's branches) and functions included."""
    graphs = [model.graph, *(f for f in model.functions)]
    while graphs:
        graph = graphs.pop()
        yield from getattr(graph, "initializer", ())
        yield from (s.values for s in getattr(graph, "sparse_initializer", ()))
        for node in graph.node:
            for attribute in node.attribute:
                yield from ([attribute.t] if attribute.HasField("t") else [])
                yield from attribute.tensors
                graphs += [attribute.g] if attribute.HasField("g") else []
                graphs += list(attribute.graphs)

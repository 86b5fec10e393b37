"""``.safetensors`` files (the format of timm and the Hugging Face hub): tensors and a header of strings, no code.

Read through the safetensors package wherever a state_dict file is read (``init.from``, ``load_model``). A file
:func:`save_safetensors` wrote from a loaded model carries that model's config in its header
(``modelforge.config``), so that ``load_model`` rebuilds it as it does from a checkpoint, and the order of the
model's state_dict (``modelforge.order``): the format keeps its tensors sorted by name, and pairing a file's
tensors with a model's by structure needs the order they were registered in.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn

from modelforge.errors import CheckpointError
from modelforge.files.atomic import write_to_path

SUFFIX = ".safetensors"
CONFIG_KEY = "modelforge.config"  # a header entry: the JSON of the run config that builds the model
ORDER_KEY = "modelforge.order"  # a header entry: the JSON list of the tensors' names in state_dict order
MODEL_PREFIX = "model."  # as a checkpoint keeps the network (ClassifierModule.model)


def is_safetensors(path: str | Path) -> bool:
    return Path(path).suffix.lower() == SUFFIX


def declared_tensors(path: str | Path) -> dict[str, tuple[list[int], int]]:
    """Each tensor's shape and size in bytes as the file's header declares them, read without mapping the data
    (a header may declare 40 GB over a sparse file); none where the header cannot be read."""
    try:
        with open(path, "rb") as file:
            length = int.from_bytes(file.read(8), "little")
            if not 0 < length <= MAX_HEADER_BYTES:
                raise ValueError(f"a header of {length:,} bytes")
            header = json.loads(file.read(length))
        return {name: ([int(d) for d in entry["shape"]], math.prod(int(d) for d in entry["shape"])
                       * _DTYPE_BYTES.get(entry["dtype"], 8))
                for name, entry in header.items() if name != "__metadata__"}
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return {}  # a damaged header: the safetensors package's reading says what is wrong


def check_declared_sizes(path: str | Path, key: str = "init.from", *, most_values: int | None = None) -> None:
    """Refuse, before anything is mapped, a file whose header declares more bytes than this machine's memory, or
    (``most_values``: the model's values in all) one tensor larger than the whole model it is to load into."""
    declared = declared_tensors(path)
    if not declared:
        return
    name, (shape, size) = max(declared.items(), key=lambda item: item[1][1])
    total = sum(size for _, size in declared.values())
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") if hasattr(os, "sysconf") else None
    if memory and total > memory:
        raise CheckpointError(f"{key}: {path} declares {total / 1e9:,.1f} GB of tensors ({name}: {shape}, "
                              f"{size / 1e9:,.1f} GB), more than this machine's {memory / 1e9:,.1f} GB of memory: "
                              "refused before reading")
    if most_values is not None and (values := math.prod(shape)) > most_values:
        raise CheckpointError(f"{key}: {path} declares {name} of shape {shape} ({values:,} values, "
                              f"{size / 1e9:,.1f} GB), more than this whole model's {most_values:,}: not weights of "
                              "this model; refused before reading")


MAX_HEADER_BYTES = 100_000_000  # the safetensors package's own limit
_DTYPE_BYTES = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1, "I16": 2, "U16": 2, "F16": 2, "BF16": 2,
                "I32": 4, "U32": 4, "F32": 4, "I64": 8, "U64": 8, "F64": 8}


def read_safetensors(path: str | Path, key: str = "init.from") -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """The tensors of a ``.safetensors`` file (in state_dict order where the header keeps it, else by name) and the
    strings of its header; a damaged file, or one that declares more than this machine's memory, is one
    CheckpointError."""
    from safetensors import SafetensorError, safe_open

    check_declared_sizes(path, key)
    try:
        with safe_open(str(path), framework="pt", device="cpu") as handle:
            metadata = dict(handle.metadata() or {})
            tensors = {name: handle.get_tensor(name) for name in handle.keys()}  # noqa: SIM118 - not a dict
    except (SafetensorError, OSError, ValueError) as exc:
        raise CheckpointError(f"{key}: {path} is not a readable .safetensors file ({exc}): cut short, or another "
                              "format with this suffix") from None
    order = _order(metadata)
    if order is not None and sorted(order) == sorted(tensors):
        tensors = {name: tensors[name] for name in order}
    return tensors, metadata


def _order(metadata: Mapping[str, str]) -> list[str] | None:
    try:
        order = json.loads(metadata[ORDER_KEY]) if ORDER_KEY in metadata else None
    except json.JSONDecodeError:
        return None
    return order if isinstance(order, list) and all(isinstance(n, str) for n in order) else None


def keeps_order(path: str | Path) -> bool:
    """Whether the file's header gives its tensors' state_dict order (else they are only known sorted by name)."""
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(path), framework="pt", device="cpu") as handle:
            return _order(handle.metadata() or {}) is not None
    except (SafetensorError, OSError, ValueError):
        return False


def read_safetensors_file(path: str | Path, key: str = "init.from") -> dict[str, Any]:
    """What ``torch.load`` would give of the file's content: its tensors by name, or, for a file that carries a
    modelforge config, a checkpoint's ``state_dict`` and ``hyper_parameters.config``."""
    tensors, metadata = read_safetensors(path, key)
    if CONFIG_KEY not in metadata:
        return tensors
    try:
        config = json.loads(metadata[CONFIG_KEY])
    except json.JSONDecodeError as exc:
        raise CheckpointError(f"{key}: {path}: its {CONFIG_KEY} header entry is not valid JSON ({exc})") from None
    return {"state_dict": {MODEL_PREFIX + name: t for name, t in tensors.items()},
            "hyper_parameters": {"config": config}}


def save_safetensors(model: nn.Module, path: str | Path, config: Mapping[str, Any] | None = None) -> Path:
    """Write ``model``'s state_dict to ``path`` as safetensors, atomically, with the config that builds it.

    ``config``: a run config (``{"model": ..., "data": ...}``); by default that of a model :func:`~modelforge.load_model`
    gave (its ``model_config`` and ``data_config``). Without one the file holds the tensors alone (for
    ``init.from``). ``model`` may be any module (torchvision's): the file keeps its state_dict order, so that
    ``init.from`` can pair it with a model by structure.
    """
    from safetensors.torch import save_file

    if config is None and hasattr(model, "model_config"):
        config = {"model": model.model_config, "data": getattr(model, "data_config", {})}
    state = model.state_dict()
    metadata = {"format": "pt", ORDER_KEY: json.dumps(list(state)),
                **({CONFIG_KEY: json.dumps(config)} if config is not None else {})}
    # safetensors refuses tensors that share memory: each is written as a copy of its own.
    tensors = {name: t.detach().contiguous().clone() for name, t in state.items()}
    path = Path(path)
    write_to_path(path, lambda tmp: save_file(tensors, str(tmp), metadata=metadata))
    return path

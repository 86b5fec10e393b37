"""``.safetensors`` files (the format of timm and the Hugging Face hub): tensors and a header of strings, no code.

Read through the safetensors package wherever a state_dict file is read (``init.from``, ``load_model``). A file
:func:`save_safetensors` wrote from a loaded model carries that model's config in its header
(``modelforge.config``), so that ``load_model`` rebuilds it as it does from a checkpoint, and the order of the
model's state_dict (``modelforge.order``): the format keeps its tensors sorted by name, and pairing a file's
tensors with a model's by structure needs the order they were registered in.
"""

from __future__ import annotations

import json
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


def read_safetensors(path: str | Path, key: str = "init.from") -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """The tensors of a ``.safetensors`` file (in state_dict order where the header keeps it, else by name) and the
    strings of its header; a damaged file is one CheckpointError."""
    from safetensors import SafetensorError, safe_open

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

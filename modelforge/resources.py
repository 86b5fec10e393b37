"""An allocation that fails while building or training a model: one message, with the size.

torch reports it as ``torch.OutOfMemoryError`` (CUDA) or as a ``RuntimeError`` from its CPU
allocator ("DefaultCPUAllocator: can't allocate memory: you tried to allocate N bytes").
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from modelforge.errors import ModelforgeError

_CPU_BYTES = re.compile(r"tried to allocate (\d+) bytes")
_CUDA_SIZE = re.compile(r"Tried to allocate ([\d.]+ [KMGT]?i?B)")
_MODEL_KEYS = ("enc_sizes", "dec_sizes", "hidden_sizes", "activation")


class ResourceError(ModelforgeError):
    """The model asked for more memory than this machine can give."""

    exit_code = 1


def is_allocation_failure(exc: BaseException) -> bool:
    import torch

    if isinstance(exc, torch.OutOfMemoryError):
        return True
    text = str(exc)
    return isinstance(exc, RuntimeError) and ("can't allocate memory" in text or "out of memory" in text.lower())


def allocation_error(exc: BaseException, model_cfg: Mapping[str, Any] | None, while_doing: str) -> ResourceError:
    """A :class:`ResourceError` naming the model config and the size asked for."""
    text = str(exc)
    cpu, cuda = _CPU_BYTES.search(text), _CUDA_SIZE.search(text)
    if cpu:
        size = f"{int(cpu.group(1)) / 1e9:,.1f} GB in one block"
    elif cuda:
        size = f"{cuda.group(1)} more on the GPU"
    else:
        size = "more memory than is free"
    where = "on the GPU" if "CUDA" in text or "cuda" in text else "in RAM"
    cfg = dict(model_cfg or {})
    model = " ".join([f"model={cfg.get('name')}", *(f"{k}={cfg[k]}" for k in _MODEL_KEYS if cfg.get(k) is not None)])
    return ResourceError(f"out of memory {while_doing}: {model} asked for {size} ({where}). "
                         "Choose smaller enc_sizes/dec_sizes, a smaller data.batch_size, "
                         "or bf16-mixed precision on a GPU")


@contextmanager
def allocation_errors(model_cfg: Mapping[str, Any] | None, while_doing: str) -> Iterator[None]:
    """Turn an allocation failure inside the block into one :class:`ResourceError`."""
    try:
        yield
    except (RuntimeError, MemoryError) as exc:
        if not (is_allocation_failure(exc) or isinstance(exc, MemoryError)):
            raise
        raise allocation_error(exc, model_cfg, while_doing) from None

"""Lightning checkpoints written crash-safe: temp file in the checkpoint's folder, fsync, rename.

Lightning's ``TorchCheckpointIO`` saves through an fsspec transaction whose temp file lives in
the system temp dir: on another filesystem than the run directory, the final step is a copy,
so a SIGKILL mid-save destroys the previous ``last.ckpt`` (and orphans the temp file), and a
full disk leaves a half-written one. Here the temp file sits beside the target and the final
step is ``os.replace``; a full disk raises one :class:`~modelforge.atomic_io.DiskFullError`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from lightning_fabric.plugins.io.torch_io import TorchCheckpointIO

from modelforge.atomic_io import write_with


def checkpoint_nbytes(checkpoint: Any) -> int:
    """The bytes of tensor data in ``checkpoint``: about what ``torch.save`` writes."""
    if isinstance(checkpoint, torch.Tensor):
        return checkpoint.numel() * checkpoint.element_size()
    if isinstance(checkpoint, dict):
        return sum(checkpoint_nbytes(v) for v in checkpoint.values())
    if isinstance(checkpoint, (list, tuple)):
        return sum(checkpoint_nbytes(v) for v in checkpoint)
    return 0


class AtomicCheckpointIO(TorchCheckpointIO):
    """``TorchCheckpointIO`` whose saves are all-or-nothing, on local paths."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path: Any, storage_options: Any | None = None) -> None:
        if storage_options is not None:
            raise TypeError(f"{type(self).__name__} takes no storage_options, got {storage_options!r}")
        write_with(Path(path), lambda handle: torch.save(checkpoint, handle), needed=checkpoint_nbytes(checkpoint))

"""Loading checkpoints safely (``weights_only=True``) and checking they fit the model."""

from __future__ import annotations

import re
import warnings
from pathlib import Path
from typing import Any

import torch
from torch import nn

from modelforge.errors import CheckpointError

# torch._weights_only_unpickler: "Detected pickle protocol 5 in the checkpoint, which was not the default ..."
_PROTOCOL_WARNING = r"Detected pickle protocol \d+ in the checkpoint"


def load_checkpoint(path: str | Path, key: str = "ckpt_path") -> dict[str, Any]:
    """Read a modelforge checkpoint with ``weights_only=True`` (no arbitrary pickles run)."""
    ckpt_path = Path(path).expanduser()
    if not ckpt_path.is_file():
        raise CheckpointError(f"{key}: no checkpoint file at {ckpt_path}")
    try:
        with warnings.catch_warnings():
            # A file pickled with another protocol than torch's 2 (pickle.dump, torch.save(pickle_protocol=5))
            # draws torch's warning just before the refusal below: the user gets one message, ours.
            warnings.filterwarnings("ignore", message=_PROTOCOL_WARNING, category=UserWarning)
            ckpt = torch.load(ckpt_path, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises many kinds for a bad file; all mean "not loadable"
        raise CheckpointError(f"{key}: {ckpt_path} is not a loadable checkpoint ({_reason(exc)})") from None
    config = ckpt.get("hyper_parameters", {}).get("config") if isinstance(ckpt, dict) else None
    if not isinstance(config, dict) or "state_dict" not in ckpt:
        raise CheckpointError(
            f"{key}: {ckpt_path} is not a modelforge checkpoint (it has no stored run config)"
        )
    return ckpt


def _reason(exc: Exception) -> str:
    """Torch's error in one line, without its advice to re-run with ``weights_only=False``.

    That advice would run whatever pickle the file holds: never repeat it to a user.
    """
    kept = []
    for line in (line.strip() for line in str(exc).splitlines()):
        if line.startswith("Weights only load failed"):
            kept.append("weights-only load refused it")
        elif line and not re.search(r"weights_only|Re-running|documentation of torch.load", line, re.IGNORECASE):
            kept.append(line.rstrip("."))
    return ": ".join(kept[:2]) or type(exc).__name__


def check_fits(ckpt: dict[str, Any], module: nn.Module, key: str = "ckpt_path") -> None:
    """Raise when the checkpoint's weights do not match ``module``'s parameters by name and shape."""
    saved = {k: tuple(v.shape) for k, v in ckpt["state_dict"].items()}
    wanted = {k: tuple(v.shape) for k, v in module.state_dict().items()}
    missing = sorted(set(wanted) - set(saved))
    unexpected = sorted(set(saved) - set(wanted))
    reshaped = sorted(k for k in set(saved) & set(wanted) if saved[k] != wanted[k])
    if not (missing or unexpected or reshaped):
        return
    stored_model = ckpt["hyper_parameters"]["config"].get("model", {})
    details = []
    if reshaped:
        details.append("shapes differ: " + ", ".join(f"{k} {saved[k]} vs {wanted[k]}" for k in reshaped[:3]))
    if missing:
        details.append(f"missing from the checkpoint: {', '.join(missing[:3])}")
    if unexpected:
        details.append(f"not in this model: {', '.join(unexpected[:3])}")
    raise CheckpointError(
        f"{key}: the checkpoint holds a different model than this config builds "
        f"(checkpoint model: {stored_model.get('name')} {_brief(stored_model)}); " + "; ".join(details)
    )


def _brief(model_cfg: dict[str, Any]) -> str:
    keys = ("enc_sizes", "dec_sizes", "hidden_sizes")
    return " ".join(f"{k}={model_cfg[k]}" for k in keys if k in model_cfg)

"""``load_model(path)``: a trained model back from a checkpoint or a run directory, with no Lightning import.

Also home of the checkpoint reading that ``train`` and ``eval`` share (``load_checkpoint``, ``check_fits``),
so that a bad path or a foreign file is the same message everywhere.
"""

from __future__ import annotations

import json
import logging
import re
import sys
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn

from modelforge.build import build_model
from modelforge.deploy.damage import CHECKPOINT, exported_kind, wrong_kind, zip_damage
from modelforge.deploy.metadata import model_metadata
from modelforge.errors import CheckpointError, DataError
from modelforge.weights.safetensors_file import is_safetensors, read_safetensors_file

log = logging.getLogger(__name__)

MODEL_PREFIX = "model."  # ClassifierModule keeps the built network as `self.model`
# torch._weights_only_unpickler: "Detected pickle protocol 5 in the checkpoint, which was not the default ..."
_PROTOCOL_WARNING = r"Detected pickle protocol \d+ in the checkpoint"
# Lightning's WeightAveraging.on_save_checkpoint puts the averaged weights in `state_dict` and the
# trained ones in `current_model_state`; the callback's own state is under its class name.
CURRENT_WEIGHTS = "current_model_state"
AVERAGING_STATE = "averaging_state"
# Where a run's config names a class (hydra.utils.instantiate builds it, after modelforge checked it).
TARGET_PLACES = re.compile(r"trainer|optim|sched|(callbacks|logger)\.[^.\[]+")


def load_checkpoint(path: str | Path, key: str = "ckpt_path") -> dict[str, Any]:
    """Read a modelforge checkpoint with ``weights_only=True`` (no arbitrary pickles run)."""
    ckpt, ckpt_path = read_torch_file(path, key), Path(path).expanduser()
    config = ckpt.get("hyper_parameters", {}).get("config") if isinstance(ckpt, dict) else None
    if not isinstance(config, dict) or "state_dict" not in ckpt:
        raise CheckpointError(f"{key}: {ckpt_path} is not a modelforge checkpoint (it has no stored run config)")
    if why := stored_config_refusal(config):
        raise CheckpointError(f"{key}: {ckpt_path} {why}")
    return ckpt


def stored_config_refusal(config: Mapping[str, Any]) -> str | None:
    """Why a checkpoint's stored run config is not used, else None: a ``_target_`` where a run's config never
    names a class (hydra's recursive instantiate would build it: ``trainer.precision: {_target_: builtins.open}``
    runs in ``eval``), or a trainer setting ``eval`` takes over (accelerator, precision) that is no plain value."""
    stack: list[tuple[str, Any]] = [("", config)]
    while stack:
        path, value = stack.pop()
        if isinstance(value, Mapping):
            if "_target_" in value and not TARGET_PLACES.fullmatch(path):
                return (f"has a stored config that names a class to build at {path or 'its top level'} "
                        f"({str(value['_target_'])[:80]!r}), where a run's config never does: refused unused")
            stack += [(f"{path}.{k}" if path else str(k), v) for k, v in value.items()]
        elif isinstance(value, (list, tuple)):
            stack += [(f"{path}[{i}]", v) for i, v in enumerate(value)]
    trainer = config.get("trainer") if isinstance(config.get("trainer"), Mapping) else {}
    for name in ("accelerator", "precision"):
        if not isinstance(trainer.get(name), (str, int, type(None))):
            return f"has a stored config whose trainer.{name} is {str(trainer[name])[:80]!r}, not a name or number"
    return None


def read_torch_file(path: str | Path, key: str = "ckpt_path") -> Any:
    """Whatever ``torch.save`` wrote at ``path``, read with ``weights_only=True``; a bad file is one CheckpointError."""
    ckpt_path = existing_file(path, key)
    if is_safetensors(ckpt_path):  # tensors and a header of strings, read by the safetensors package
        return read_safetensors_file(ckpt_path, key)
    if (exported := exported_kind(ckpt_path)) is not None:  # torch.load would hand a TorchScript file to torch.jit.load
        raise CheckpointError(f"{key}: {ckpt_path} {wrong_kind(exported, CHECKPOINT, ckpt_path.suffix or 'no')}")
    try:
        with warnings.catch_warnings():
            # A file pickled with another protocol than torch's 2 (pickle.dump, torch.save(pickle_protocol=5))
            # draws torch's warning just before the refusal below: the user gets one message, ours.
            warnings.filterwarnings("ignore", message=_PROTOCOL_WARNING, category=UserWarning)
            ckpt = torch.load(ckpt_path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - torch raises many kinds for a bad file; all mean "not loadable"
        damage = zip_damage(ckpt_path, "checkpoint") or f"is not a loadable checkpoint ({_reason(exc)})"
        raise CheckpointError(f"{key}: {ckpt_path} {damage}") from None
    return ckpt


def existing_file(path: str | Path, key: str = "ckpt_path") -> Path:
    """``path`` (``~`` expanded) when a file is there, else the CheckpointError that says none is."""
    found = Path(path).expanduser()
    if not found.is_file():
        raise CheckpointError(f"{key}: no checkpoint file at {found}")
    return found


def _reason(exc: Exception) -> str:
    """Torch's error in one line, without its advice to re-run with ``weights_only=False`` (that runs the pickle)."""
    kept = []
    for line in (line.strip() for line in str(exc).splitlines()):
        if line.startswith("Weights only load failed"):
            kept.append("weights-only load refused it")
        elif line and not re.search(r"weights_only|Re-running|documentation of torch.load", line, re.IGNORECASE):
            # torch's advice to allowlist what it refused (add_safe_globals) would run the payload
            line = re.sub(r"^WeightsUnpickler error: |\.? ?Please use `torch\.serialization\.add_safe_globals.*$", "",
                          line)
            kept.append(line.rstrip("."))
    return ": ".join(kept[:2]) or type(exc).__name__


def check_fits(ckpt: dict[str, Any], module: nn.Module, key: str = "ckpt_path") -> None:
    """Raise when the checkpoint's weights do not match ``module``'s parameters by name and shape."""
    saved = {k: tuple(v.shape) for k, v in ckpt["state_dict"].items()}
    wanted = {k: tuple(v.shape) for k, v in module.state_dict().items()}
    reshaped = sorted(k for k in set(saved) & set(wanted) if saved[k] != wanted[k])
    details = [f"{what}: {', '.join(names[:3])}" for what, names in (
        ("shapes differ", [f"{k} {saved[k]} vs {wanted[k]}" for k in reshaped]),
        ("missing from the checkpoint", sorted(set(wanted) - set(saved))),
        ("not in this model", sorted(set(saved) - set(wanted)))) if names]
    if details:
        model = ckpt["hyper_parameters"]["config"].get("model", {})
        brief = " ".join(f"{k}={model[k]}" for k in ("enc_sizes", "dec_sizes", "hidden_sizes") if k in model)
        raise CheckpointError(f"{key}: the checkpoint holds a different model than this config builds "
                              f"(checkpoint model: {model.get('name')} {brief}); " + "; ".join(details))


def resolve_checkpoint(path: str | Path, key: str = "ckpt_path") -> tuple[Path, str]:
    """The checkpoint file ``path`` names, and which it is: ``path`` itself, or in a run directory its
    ``checkpoints/last.ckpt`` (the weights its metrics.json test figures are of), else its best one."""
    given = Path(path).expanduser()
    if not given.is_dir():
        return given, "the checkpoint given"  # load_checkpoint says what is wrong with it
    ckpt_dir = given / "checkpoints"
    recorded = _recorded_best(given)
    candidates = [(ckpt_dir / "last.ckpt", "the run's last checkpoint, the one its test metrics are of")]
    candidates += [(p, "the run's best checkpoint: it has no last.ckpt") for p in
                   ([ckpt_dir / recorded.name, recorded] if recorded else [])]  # a moved run: its own copy
    if found := next((c for c in candidates if c[0].is_file()), None):
        return found
    there = sorted(p.name for p in ckpt_dir.glob("*.ckpt")) if ckpt_dir.is_dir() else []
    hint = (f"; it holds {', '.join(there)}: name one ({key}={ckpt_dir / there[0]})" if there else
            "" if ckpt_dir.is_dir() else " (it has no checkpoints/ folder: is it a training run's directory?)")
    raise CheckpointError(f"{key}: no checkpoint in run directory {given}: looked for "
                          f"{', '.join(str(p) for p, _ in candidates)}{hint}")


def _recorded_best(run_dir: Path) -> Path | None:
    try:
        best = json.loads((run_dir / "metrics.json").read_text()).get("best_ckpt")
    except (OSError, ValueError, AttributeError):
        return None
    return Path(best) if isinstance(best, str) and best else None


def model_weights(ckpt: Mapping[str, Any], *, ema: bool = True) -> tuple[dict[str, torch.Tensor], str | None]:
    """The network's weights in ``ckpt`` (the ``model.`` prefix stripped), and which averaging made them:
    ``"EMA"`` (Lightning's ``EMAWeightAveraging``), another averaging callback's name, or None (the trained
    weights). ``ema=False``: the trained weights even when the run averaged them."""
    averaged = CURRENT_WEIGHTS in ckpt
    state = ckpt[CURRENT_WEIGHTS] if averaged and not ema else ckpt["state_dict"]
    weights = {k[len(MODEL_PREFIX):]: v for k, v in state.items() if k.startswith(MODEL_PREFIX)}
    if not averaged or not ema:
        return weights, None
    names = [str(k) for k in (ckpt.get("callbacks") or {}) if "WeightAveraging" in str(k)]
    return weights, "EMA" if any(n.startswith("EMA") for n in names) else (names[0] if names else "averaged")


def load_model(path: str | Path, *, ema: bool = True) -> nn.Module:
    """The model a run trained, rebuilt from the config stored in its checkpoint, with its weights, in eval mode.

    ``path``: a ``.ckpt`` written by ``train``, or a run directory (its ``checkpoints/last.ckpt``, whose
    test metrics the run recorded, else its best checkpoint; the one used is said). Hook plugins are never
    attached. A run that averaged its weights (``callbacks=[ema]``) gives the averaged weights, as its
    checkpoints hold them; ``ema=False`` the trained ones. The module also carries ``model_config`` (dict),
    ``modelforge_meta`` (see :func:`modelforge.deploy.metadata.model_metadata`), ``checkpoint_path`` and
    ``data_config`` (the run's).
    """
    ckpt_path, which = resolve_checkpoint(path)
    ckpt = load_checkpoint(ckpt_path)
    stored = ckpt["hyper_parameters"]["config"]
    model = build_model(stored["model"])
    weights, averaging = model_weights(ckpt, ema=ema)
    check_fits({**ckpt, "state_dict": weights}, model)
    model.load_state_dict(weights)
    model.eval()
    chosen = f"{ckpt_path} ({which})" if Path(path).expanduser().is_dir() else str(ckpt_path)
    _say(f"loaded {stored['model'].get('name')} from {chosen}"
         + (f", using the {averaging} weights" if averaging else "")
         + (" (callbacks=[ema] ran, but ema=False: the trained weights)" if not ema and CURRENT_WEIGHTS in ckpt else ""))
    if averaging and int(ckpt.get(AVERAGING_STATE, {}).get("n_averaged", 1)) == 0:
        log.warning("the run's weight average was never updated (n_averaged 0): these are the weights the "
                    "averaging started from, as the run itself tested them; ema=False gives the trained ones")
    model.model_config = dict(stored["model"])
    model.modelforge_meta = _metadata(stored, model)
    model.checkpoint_path = ckpt_path
    model.data_config = dict(stored.get("data") or {})  # where the run's images are: export checks on them
    return model


def _metadata(stored: Mapping[str, Any], model: nn.Module) -> dict[str, Any]:
    shape = getattr(model, "input_shape", None)
    try:
        return model_metadata(stored, input_shape=shape)
    except DataError as exc:  # data=idx stats computed from files that are gone: the model still loads
        log.warning("the model's input normalization is unknown: %s", exc)
        meta = model_metadata({**stored, "data": {**(stored.get("data") or {}), "normalize": False}}, input_shape=shape)
        return {**meta, "normalize": None, "normalize_unknown": str(exc)}


def _say(message: str) -> None:
    """Logged where logging is set up (the CLI, an application), else printed to stderr: said either way."""
    if log.isEnabledFor(logging.INFO) and (logging.getLogger().handlers or log.handlers):
        log.info(message)
    else:
        print(message, file=sys.stderr)

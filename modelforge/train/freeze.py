"""``freeze``: parameters chosen by glob get ``requires_grad=False``, the norm layers wholly inside them stay in eval
mode; :class:`FrozenWeights` keeps those tensors as they were while the run trains. Applied with ``init.from`` by
:func:`modelforge.train.transfer.apply_transfer`.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import Callback
from torch import nn

from modelforge.errors import ConfigError, closest_globs, closest_names

MAX_LISTED = 40  # names listed under "allowed" in an error


@dataclass(frozen=True)
class Frozen:
    """The parameters ``freeze`` chose and the norm modules kept in eval mode, by their names in the model."""

    globs: tuple[str, ...] = ()
    params: tuple[str, ...] = ()
    norms: tuple[str, ...] = ()

    def tensors(self, model: nn.Module) -> dict[str, torch.Tensor]:
        """The live tensors training must leave as they are: frozen parameters, frozen norms' statistics."""
        state = {**dict(model.named_parameters()), **dict(model.named_buffers())}
        buffers = [f"{norm}.{b}" for norm in self.norms for b, _ in model.get_submodule(norm).named_buffers()]
        return {name: state[name] for name in (*self.params, *buffers)}



# --- freeze ------------------------------------------------------------------------------------

def _prefixes(name: str) -> list[str]:
    """``a.b.c`` -> ``a``, ``a.b``, ``a.b.c``: the name and the modules it lies in."""
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts) + 1)]


def _covered(name: str, glob: str) -> bool:
    return any(fnmatch.fnmatchcase(prefix, glob) for prefix in _prefixes(name))


def _listing(names: Mapping[str, Any] | list[str]) -> str:
    listed = list(names)
    more = f" ... ({len(listed) - MAX_LISTED} more)" if len(listed) > MAX_LISTED else ""
    return ", ".join(listed[:MAX_LISTED]) + more


def _partial_modules(model: nn.Module, params: Mapping[str, nn.Parameter]) -> list[str]:
    """The model's modules that hold some of its parameters but not all, in the model's order: what ``freeze`` may
    name (a module without parameters matches none; one holding them all leaves nothing to train)."""
    return [n for n, m in model.named_modules() if n and 0 < sum(1 for _ in m.parameters()) < len(params)]


def _example(parts: list[str]) -> str:
    """A glob that freezes a part of the model: its first outermost part's contents."""
    return f"{min(parts, key=lambda n: n.count('.'))}.*" if parts else "encoder.*"


def freeze(model: nn.Module, globs: list[str] | tuple[str, ...], freeze_bn: bool = True,
           path: str = "freeze") -> Frozen:
    """Set ``requires_grad=False`` on the parameters that ``globs`` match, by name or by a module they lie in.

    Returns them, with the norm layers (running statistics) wholly inside the frozen part (``freeze_bn``).

    Raises:
        ConfigError: at ``path[i]`` when glob ``i`` matches no parameter (with the closest names), or when
            the globs freeze every parameter.
    """
    params = dict(model.named_parameters())
    parts = _partial_modules(model, params)
    chosen: set[str] = set()
    for i, glob in enumerate(globs):
        matched = {name for name in params if _covered(name, glob)}
        if not matched:
            # Only what this model has and freeze takes: a glob that freezes a part of it.
            valid = [g for g in closest_globs(glob, params, n=5)
                     if 0 < sum(_covered(n, g) for n in params) < len(params)]
            raise ConfigError(f"{path}[{i}]", f"{glob!r} matches no parameter of {type(model).__name__}",
                              suggestions=valid[:1] or closest_names(glob, parts),
                              allowed=f"module names: {_listing(parts)}",
                              hint=f"a glob over parameter names ({_example(parts)}) or a module's name; "
                                   "`python -m modelforge summary` lists the modules")
        chosen |= matched
    if params and len(chosen) == len(params):
        raise ConfigError(path, f"{list(globs)} freezes every parameter of the model: nothing would train",
                          hint=f"freeze a part, e.g. freeze=[{_example(parts)}]" if parts else None)
    for name in chosen:
        params[name].requires_grad_(False)
    norms = []
    if freeze_bn and chosen:
        for name, module in model.named_modules():
            if not (isinstance(module, nn.modules.batchnorm._NormBase) and module.track_running_stats):
                continue
            own = [f"{name}.{p}" for p, _ in module.named_parameters()]
            if any(_covered(name, glob) for glob in globs) or own and all(p in chosen for p in own):
                norms.append(name)
    return Frozen(tuple(globs), tuple(n for n in params if n in chosen), tuple(norms))


class FrozenWeights(Callback):
    """Keeps a run's frozen tensors exactly as they were loaded, and its frozen norm layers in eval mode.

    The optimizer never steps frozen parameters; a weight-averaging callback still writes its average of
    them back (an EMA of a constant drifts by rounding: ``0.999 * x + 0.001 * x`` is not ``x`` in float32),
    at each validation, when training ends and into every checkpoint. Those are put back here; Lightning
    runs these hooks after the user's callbacks' (this one is added last).
    """

    def __init__(self, frozen: Frozen, attribute: str = "model") -> None:
        self.frozen = frozen
        self.attribute = attribute  # where the LightningModule keeps the network
        self._kept: dict[str, torch.Tensor] = {}

    def _network(self, pl_module: pl.LightningModule) -> nn.Module:
        return getattr(pl_module, self.attribute)

    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # After a resume's checkpoint is restored: these are the weights this run started from.
        self._kept = {name: t.detach().clone() for name, t in self.frozen.tensors(self._network(pl_module)).items()}

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any,
                             batch_idx: int) -> None:
        # Lightning puts the whole model in train mode when fitting starts and after each validation.
        network = self._network(pl_module)
        for name in self.frozen.norms:
            network.get_submodule(name).eval()

    def _restore(self, pl_module: pl.LightningModule) -> None:
        live = self.frozen.tensors(self._network(pl_module))
        with torch.no_grad():
            for name, kept in self._kept.items():
                live[name].copy_(kept)

    def on_validation_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._restore(pl_module)

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._restore(pl_module)

    def on_save_checkpoint(self, trainer: pl.Trainer, pl_module: pl.LightningModule,
                           checkpoint: dict[str, Any]) -> None:
        # WeightAveraging keeps the trained weights under current_model_state, its average under state_dict.
        for key in ("state_dict", "current_model_state"):
            if isinstance(checkpoint.get(key), dict):
                checkpoint[key].update({f"{self.attribute}.{name}": kept for name, kept in self._kept.items()})

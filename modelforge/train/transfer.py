"""Starting a run from other weights (``init.from``) and freezing parts of the model (``freeze``).

``init.from`` names a modelforge checkpoint, a run directory (the checkpoint ``load_model`` picks
there: its ``last.ckpt``), a plain state_dict file (``torch.save(model.state_dict())``, or a dict holding one
under ``state_dict`` or ``model``; or a ``.safetensors`` file), or torchvision's ImageNet weights for a zoo
model (``torchvision:resnet50``, ``torchvision:resnet50.IMAGENET1K_V1``: fetched into torch.hub's cache). After
the model's own init, the tensors whose names (renamed by the globs of ``init.map``) and shapes match are copied
in; the rest are reported, or refused with ``init.strict=true``. A file none of whose names are the model's
(torchvision's own, ``layer1.0.conv1.weight``) is paired with the model by structure instead
(:mod:`modelforge.weights.pairing`), a head of other outputs left as initialized. ``freeze`` globs pick
parameters (``encoder.*``) or modules (``nodes.layer1``) by their dotted names: those get ``requires_grad=False``,
and the norm layers wholly inside them stay in eval mode, their running statistics frozen, unless
``freeze_bn=false``. ``validate_run_config`` applies both, before any work;
:class:`~modelforge.train.freeze.FrozenWeights` keeps the frozen tensors as they were while the run trains.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import InitVar, dataclass, field
from pathlib import Path
from typing import Any

import torch
from pytorch_lightning.callbacks import Callback
from torch import nn

from modelforge.config_types import check_type
from modelforge.deploy.load import (
    load_checkpoint,
    model_weights,
    read_torch_file,
    resolve_checkpoint,
)
from modelforge.errors import CheckpointError, ConfigError, closest_globs, closest_paths
from modelforge.train.freeze import Frozen, FrozenWeights, _listing, freeze
from modelforge.weights.hub import cache_path, fetch
from modelforge.weights.pairing import Pairing, PairingError, pair_by_structure, shapes_of
from modelforge.weights.safetensors_file import check_declared_sizes, is_safetensors, keeps_order
from modelforge.weights.torchvision_zoo import (
    TorchvisionWeights,
    is_torchvision_source,
    near_prefix,
    preprocessing_note,
    torchvision_weights,
)

# Prefixes a whole state_dict may carry from its wrapper: a LightningModule's attribute, DataParallel /
# AveragedModel, torch.compile(module). Removed when every key has one and the model has no such child.
WRAPPER_PREFIXES = ("model.", "module.", "_orig_mod.")
SHOWN = 3  # names shown per kind in the log and in errors


@dataclass(frozen=True)
class InitReport:
    """What ``init.from`` loaded into the model, and what it left out (each in the model's names)."""

    source: Path  # the file read
    chosen: str  # which file of a run directory it is ("the run's best checkpoint"), or "the checkpoint given"
    averaging: str | None  # "EMA" when the file holds a run's averaged weights
    total: int  # tensors in the model's state_dict
    loaded: tuple[str, ...] = ()
    missing: tuple[str, ...] = ()  # in the model, not in the file: left as initialized
    unexpected: tuple[str, ...] = ()  # in the file, not in the model: ignored
    reshaped: tuple[str, ...] = ()  # in both with other shapes: "name [file] vs [model]", left as initialized
    paired: bool = False  # by structure (the file's names are not the model's), not by name
    new_head: bool = False  # what ``reshaped`` holds is the model's head, of other outputs than the file's
    constants: tuple[str, ...] = ()  # the file's integer buffers equal to constants of the model: checked, skipped
    notes: tuple[str, ...] = ()  # said after the counts (the preprocessing torchvision's weights were trained with)

    def problems(self) -> list[str]:
        kinds = (("missing from the file", self.missing), ("not in this model", self.unexpected),
                 ("shapes differ", self.reshaped))
        return [f"{len(names)} {what} ({_first(names)})" for what, names in kinds if names]

    def lines(self) -> list[str]:
        which = [self.chosen] if self.chosen != "the checkpoint given" else []
        notes = ", ".join([*which, *([f"its {self.averaging} weights"] if self.averaging else []),
                           *(["paired by structure: the file's names are not the model's"] if self.paired else [])])
        lines = [f"init.from: loaded {len(self.loaded)} of the model's {self.total} tensors from {self.source}"
                 + (f" ({notes})" if notes else "")]
        reshaped = ("of a new head (other outputs than the file's), left as initialized to be trained"
                    if self.new_head else "with other shapes, left as initialized")
        for what, names in (("missing from the file, left as initialized", self.missing),
                            (reshaped, self.reshaped),
                            ("in the file but not in this model, ignored", self.unexpected)):
            if names:
                lines.append(f"init.from: {len(names)} {what}: {_first(names)}")
        if self.constants:
            lines.append(f"init.from: {len(self.constants)} integer buffers of the file equal the model's constants "
                         f"(made from its config, not saved), checked and skipped: {_first(self.constants)}")
        return lines + [f"init.from: {note}" for note in self.notes]

    def record(self) -> dict[str, Any]:
        """For metrics.json: counts, and the first names of each kind left out."""
        return {"from": str(self.source), "weights": self.averaging or "trained", "loaded": len(self.loaded),
                **({"source": self.chosen, "paired": "structure"} if self.paired else {}),
                **({"constants": {"count": len(self.constants), "first": list(self.constants[:SHOWN])}}
                   if self.constants else {}),
                **{kind: {"count": len(names), "first": list(names[:SHOWN])}
                   for kind, names in (("missing", self.missing), ("unexpected", self.unexpected),
                                       ("reshaped", self.reshaped))}}


@dataclass(frozen=True)
class Transfer:
    """What ``init`` and ``freeze`` did to a run's freshly built model."""

    init: InitReport | None = None
    frozen: Frozen = field(default_factory=Frozen)
    skipped: str | None = None  # why init.from was not loaded

    def lines(self, model: nn.Module) -> list[str]:
        lines = self.init.lines() if self.init else [f"init.from: {self.skipped}"] if self.skipped else []
        if self.frozen.params:
            params = dict(model.named_parameters())
            n_frozen = sum(params[name].numel() for name in self.frozen.params)
            total = sum(p.numel() for p in params.values())
            lines.append(f"freeze {list(self.frozen.globs)}: {len(self.frozen.params)} parameter tensors, "
                         f"{n_frozen:,} of {total:,} params ({total - n_frozen:,} trainable)")
            lines.append("freeze: norm layers kept in eval mode (statistics frozen): "
                         + (_first(self.frozen.norms) if self.frozen.norms else "none"))
        return lines

    def record(self, model: nn.Module) -> dict[str, Any]:
        """For metrics.json: ``init`` (what was loaded) and ``frozen`` (what was frozen), where used."""
        record: dict[str, Any] = {"init": self.init.record()} if self.init else {}
        if self.frozen.params:
            record["frozen"] = {"globs": list(self.frozen.globs), "tensors": len(self.frozen.params),
                                "trainable_params": sum(p.numel() for p in model.parameters() if p.requires_grad),
                                "norms_in_eval": list(self.frozen.norms)}
        return record

    def callbacks(self) -> list[Callback]:
        from modelforge.train.short_finetune import ShortFineTuneCheck

        kept = [FrozenWeights(self.frozen)] if self.frozen.params or self.frozen.norms else []
        return kept + ([ShortFineTuneCheck(str(self.init.source), self.frozen.norms)] if self.init else [])


def _first(names: tuple[str, ...] | list[str]) -> str:
    more = f", ... ({len(names) - SHOWN} more)" if len(names) > SHOWN else ""
    return ", ".join(names[:SHOWN]) + more


@dataclass
class TransferPlan:
    """``init``, ``freeze`` and ``freeze_bn`` of a run config (typed by TrainConfig), checked when made where the
    schema cannot type them (``init.map``, ``freeze``): what :func:`apply_transfer` does to a built model.
    ``data``: the run's data options (a torchvision file's preprocessing is compared with them)."""

    init: InitVar[Mapping[str, Any] | None]
    freeze: Any = ()
    freeze_bn: bool = True
    data: Mapping[str, Any] | None = None
    source: str | None = field(init=False)
    mapping: dict[str, str | None] = field(init=False)
    strict: bool = field(init=False)

    def __post_init__(self, init: Mapping[str, Any] | None) -> None:
        init = init or {}
        self.source, self.mapping, self.strict = init.get("from"), init.get("map") or {}, bool(init.get("strict"))
        check_type(self.mapping, dict[str, Any], "init.map")
        for glob, target in self.mapping.items():
            check_type(target, str | None, f"init.map.{glob}")
        self.freeze = [self.freeze] if isinstance(self.freeze, str) else self.freeze or []
        check_type(self.freeze, list[str], "freeze")


def apply_transfer(plan: TransferPlan | Mapping[str, Any], model: nn.Module, *, resuming: bool = False) -> Transfer:
    """Apply a :class:`TransferPlan` (or the run config to read one from) to its built ``model``, checking the files.

    A resumed run (``resuming``) takes its weights from ``ckpt_path``: ``init.from`` is checked, not loaded.
    """
    if isinstance(plan, Mapping):
        plan = TransferPlan(plan.get("init"), plan.get("freeze"), plan.get("freeze_bn", True), plan.get("data"))
    source, mapping, strict, globs = plan.source, plan.mapping, plan.strict, plan.freeze
    report, skipped = None, None
    if is_torchvision_source(source):
        torchvision_weights(source)  # a name torchvision has, checked before any download
    elif source is not None:
        require_path(source, "init.from")
    if is_torchvision_source(source) and resuming:
        skipped = f"{source} not loaded: this run resumes from ckpt_path, whose weights it continues"
    elif source is not None and resuming:
        found, _ = resolve_checkpoint(source, "init.from")
        if not found.is_file():
            raise CheckpointError(f"init.from: no checkpoint file at {found}")
        skipped = f"{found} not loaded: this run resumes from ckpt_path, whose weights it continues"
    elif source is not None:
        report = load_init_weights(model, source, mapping, strict, data=plan.data)
    elif mapping or strict:
        raise ConfigError("init.map" if mapping else "init.strict", "applies to the weights of init.from, which is unset",
                          hint="init.from=RUN_DIR_OR_FILE")
    return Transfer(report, freeze(model, globs, plan.freeze_bn), skipped)


# --- init.from ---------------------------------------------------------------------------------

def require_path(path: str | Path, key: str) -> None:
    """Refuse a ``path`` that does not exist, naming it whole and what it may have meant (``runs/mnsit``)."""
    given = Path(path).expanduser()
    if not given.exists():
        near = closest_paths(given) or ([prefixed] if (prefixed := near_prefix(str(path))) else [])
        raise CheckpointError(f"{key}: no checkpoint file at {os.path.abspath(given)}"
                              + (f"\n  did you mean {' or '.join(repr(n) for n in near)}?" if near else ""))


def load_init_weights(model: nn.Module, path: str | Path, mapping: Mapping[str, str | None] | None = None,
                      strict: bool = False, key: str = "init.from", data: Mapping[str, Any] | None = None) -> InitReport:
    """Copy the tensors of ``path`` that fit into ``model`` (names after ``mapping``, same shapes; a file none of
    whose names the model has, and torchvision's weights: paired by structure). ``path`` may be
    ``torchvision:MODEL[.WEIGHTS]``, fetched into torch.hub's cache; ``data`` (the run's data config) is compared
    with the preprocessing those weights were trained with.

    Raises:
        CheckpointError: a bad path or file; no tensor fits; with ``strict``, any tensor missing,
            left over or of another shape; torchvision's weights that cannot be fetched or paired.
        ConfigError: a glob of ``mapping`` that matches no tensor of the file.
    """
    hub = torchvision_weights(str(path), key) if is_torchvision_source(path) else None
    wanted = model.state_dict()
    if hub is not None and not cache_path(hub).is_file():
        _pairs_before_download(hub, wanted, key)
    source, chosen = (fetch(hub, key), hub.label) if hub else resolve_checkpoint(path, key)  # a run directory: its ckpt
    source = Path(os.path.abspath(source))  # printed whole, as the run directory is
    if is_safetensors(source):  # its header may declare gigabytes over a sparse file: checked before mapping
        check_declared_sizes(source, key, most_values=sum(t.numel() for t in wanted.values()))
    weights, averaging = read_weights(source, key)
    weights = rename(_strip_wrapper_prefix(weights, wanted), mapping or {}, source)
    weights, constants = _without_constants(weights, model, wanted)
    pairing = None
    if hub is not None or (not mapping and not any(k in wanted for k in weights)):
        pairing = _paired(weights, wanted, source, key, by_name_failed=hub is None)
        weights = {ours: weights[theirs] for ours, theirs in (*pairing.pairs.items(), *pairing.head)}
    fits = {k: v.shape == wanted[k].shape for k, v in weights.items() if k in wanted}
    report = InitReport(
        source, chosen, averaging, len(wanted), loaded=tuple(k for k in wanted if fits.get(k)),
        missing=tuple(k for k in wanted if k not in weights),
        unexpected=(*(k for k in weights if k not in wanted), *(pairing.unused if pairing else ())),
        constants=constants,
        reshaped=tuple(f"{k} {list(weights[k].shape)} vs {list(wanted[k].shape)}" for k in wanted
                       if fits.get(k) is False),
        paired=pairing is not None, new_head=bool(pairing and pairing.head),
        notes=(preprocessing_note(hub, data),) if hub else ())
    if strict and report.problems():
        raise CheckpointError(f"{key}: {source} does not fit this model exactly (init.strict=true): "
                              + "; ".join(report.problems())
                              + "\n  hint: init.strict=false loads the tensors that fit and reports the rest; "
                                "init.map={old.*:new.*} renames the file's tensors")
    if not report.loaded:
        raise CheckpointError(f"{key}: no tensor of {source} fits this model: " + "; ".join(report.problems())
                              + "\n  hint: init.map={old.*:new.*} renames the file's tensors to the model's names "
                                "(`python -m modelforge summary` lists them)")
    if kinds := [f"{k} is {weights[k].dtype} for the model's {wanted[k].dtype}" for k in report.loaded
                 if weights[k].is_floating_point() != wanted[k].is_floating_point()]:
        raise CheckpointError(f"{key}: {source}: {_first(kinds)}: integer or bool tensors are no weights of "
                              "floating-point parameters (nor the reverse), and copying would cast them without a "
                              "word; refused")
    model.load_state_dict({k: weights[k] for k in report.loaded}, strict=False)
    return report


def _without_constants(weights: dict[str, torch.Tensor], model: nn.Module,
                       wanted: Mapping[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], tuple[str, ...]]:
    """The file's tensors without its integer buffers that equal a constant of the model, and their names.

    A graph keeps fixed tensors (Swin's relative position index) as ``constant`` nodes, made again from the config
    and not saved; torchvision saves them as buffers. Such a buffer is checked against the model's constants (the
    same values, flattened) and skipped; one that equals none stays, and is refused where it pairs with nothing.
    """
    constants = [b for n, b in model.named_buffers() if n not in wanted and not b.is_floating_point()]
    if not constants:
        return weights, ()
    skipped = tuple(n for n, t in weights.items() if n not in wanted and not t.is_floating_point() and any(
        c.dtype == t.dtype and c.numel() == t.numel() and torch.equal(c.flatten(), t.flatten()) for c in constants))
    return {n: t for n, t in weights.items() if n not in skipped}, skipped


def _pairs_before_download(hub: TorchvisionWeights, wanted: Mapping[str, torch.Tensor], key: str) -> None:
    """Refuse torchvision's weights that would not pair with the model, before downloading them: the file's shapes
    are those of the zoo's model of that name built as torchvision's (3 channels, 1000 classes, its crop size), on
    the meta device (no memory)."""
    from modelforge.build import create_model

    size = hub.crop_size
    with torch.device("meta"):
        theirs = create_model(hub.model, ["in_channels=3", "n_classes=1000", f"input_size=[{size},{size}]"])
    try:
        pair_by_structure(shapes_of(theirs.state_dict()), shapes_of(wanted), source=hub.label)
    except PairingError as exc:
        raise CheckpointError(f"{key}: {hub.label} would not load into this model, so it was not downloaded: its "
                              f"tensors (named as the zoo's {hub.model} built as torchvision's) do not pair with the "
                              f"model's by structure: {exc.reason}\n  hint: {exc.hint}"
                              ) from None


def _paired(weights: dict[str, torch.Tensor], wanted: Mapping[str, torch.Tensor], source: Path, key: str,
            by_name_failed: bool) -> Pairing:
    """The file's tensors paired with the model's by structure. A file that was tried by name first (no name in
    common) and does not pair either gets the by-name refusal, with why pairing failed too."""
    try:
        if is_safetensors(source) and not keeps_order(source):
            raise PairingError(str(source), "a .safetensors file keeps its tensors sorted by name, not in the order "
                               "they were registered in, which pairing needs",
                               "give init.map={old.*:new.*}, or the weights as a torch file (torch.save(model."
                               "state_dict(), PATH)), or write them with modelforge.weights.save_safetensors")
        return pair_by_structure(shapes_of(weights), shapes_of(wanted), source=str(source))
    except PairingError as exc:
        if not by_name_failed:
            raise CheckpointError(f"{key}: {exc}") from None
        unexpected = list(weights)
        raise CheckpointError(f"{key}: no tensor of {source} fits this model: {len(wanted)} missing from the file "
                              f"({_first(list(wanted))}); {len(unexpected)} not in this model ({_first(unexpected)})"
                              f"\n  no name is the model's, nor does it pair by structure: {exc.reason}"
                              f"\n  hint: {exc.hint}") from None


def read_weights(path: Path, key: str = "init.from") -> tuple[dict[str, torch.Tensor], str | None]:
    """The named tensors in ``path`` (read with ``weights_only=True``) and which averaging made them.

    A modelforge checkpoint gives its network's weights (the averaged ones of a ``callbacks=[ema]`` run);
    any other file, its state_dict: the file itself, or its ``state_dict`` or ``model`` entry.
    """
    content = read_torch_file(path, key)
    if isinstance(content, Mapping) and isinstance(content.get("hyper_parameters"), Mapping):
        return model_weights(load_checkpoint(path, key))  # a modelforge checkpoint, checked as eval checks one
    if isinstance(content, Mapping):
        inner = next((content[k] for k in ("state_dict", "model") if isinstance(content.get(k), Mapping)), content)
        tensors = {str(k): v for k, v in inner.items() if isinstance(v, torch.Tensor)}
        if tensors:
            return tensors, None
    raise CheckpointError(f"{key}: {path} holds no weights: expected a modelforge checkpoint or run directory, "
                          "a state_dict (torch.save(model.state_dict(), PATH)), or a dict holding one under "
                          "'state_dict' or 'model'")


def _strip_wrapper_prefix(weights: dict[str, torch.Tensor], wanted: Mapping[str, Any]) -> dict[str, torch.Tensor]:
    for prefix in WRAPPER_PREFIXES:
        if all(k.startswith(prefix) for k in weights) and not any(k.startswith(prefix) for k in wanted):
            weights = {k[len(prefix):]: v for k, v in weights.items()}
    return weights


def _glob_regex(glob: str) -> re.Pattern[str]:
    """``glob`` (``*``: any text, dots included; ``?``: one character) with each wildcard a group."""
    return re.compile("".join("(.*)" if c == "*" else "(.)" if c == "?" else re.escape(c) for c in glob))


def _fill(target: str, parts: tuple[str, ...]) -> str:
    """``target`` with its wildcards replaced, in order, by ``parts``."""
    pieces = re.split(r"[*?]", target)
    return "".join(p + w for p, w in zip(pieces, (*parts, ""), strict=True))


def rename(weights: dict[str, torch.Tensor], mapping: Mapping[str, str | None], source: Path | str = "the file",
           path: str = "init.map") -> dict[str, torch.Tensor]:
    """``weights`` with names renamed by ``mapping`` (``{"head.*": "classifier.*"}``: each wildcard of the
    target takes what its counterpart matched; ``None``: dropped). The first glob that matches a name wins."""
    rules = []
    for glob, target in mapping.items():
        if target is not None and sum(target.count(c) for c in "*?") != sum(glob.count(c) for c in "*?"):
            raise ConfigError(f"{path}.{glob}", f"{glob!r} -> {target!r}: the two sides need the same wildcards "
                              "(* and ?), in the same order", hint="init.map={head.*:classifier.*}")
        rules.append((glob, _glob_regex(glob), target))
    renamed: dict[str, torch.Tensor] = {}
    origin: dict[str, str] = {}
    used: set[str] = set()
    for name, tensor in weights.items():
        new: str | None = name
        for glob, regex, target in rules:
            if match := regex.fullmatch(name):
                used.add(glob)
                new = None if target is None else _fill(target, match.groups())
                break
        if new is None:
            continue
        if new in renamed:
            raise ConfigError(path, f"{origin[new]!r} and {name!r} of {source} would both load into {new!r}")
        renamed[new], origin[new] = tensor, name
    for glob, _, _ in rules:
        if glob not in used:
            raise ConfigError(f"{path}.{glob}", f"{glob!r} matches no tensor of {source}",
                              suggestions=closest_globs(glob, weights), allowed=_listing(weights),
                              hint="the map's keys are the file's names, its values the model's")
    return renamed

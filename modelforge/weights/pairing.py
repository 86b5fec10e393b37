"""Pairing a file's tensors with a model's when their names differ: by structure, computed from the two state_dicts.

A state_dict lists a module's own tensors, then its children's, in the order they were registered. Two
definitions of one network (torchvision's ``ResNet`` and the zoo's ``resnet50.yaml``) register the same layers
in the same order, but they place some tensors differently: torchvision's ViT registers its class token on the
model itself, before the patch convolution; its ConvNeXt block its layer scale before the block's layers.
So tensors are not paired by position alone but by position within their kind: the k-th tensor of one
(kind, shape, dtype) in the file with the k-th of the same in the model. The kind (a norm's running mean or
variance, its step counter, a bias, any other weight) keeps a norm's four same-shaped vectors apart.

Checked: every tensor finds its partner, and the pairs respect modules (all tensors of one module of the file go
to one module of the model, and no two modules of the file share one). The one exception is the head: the last
tensors of both, of the same kind and input width but another number of outputs (a 10-class head on 1000-class
weights), or the model's last tensors where the file has none left over, are left unpaired, to be trained. The
file's last tensors where the model has none left over (a full model's file loaded into a model without its head,
or one that ends at a feature map) are not loaded, and named (``unused``). Anything else is one error naming the
first tensor on each side.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch

from modelforge.errors import CheckpointError

Shapes = Mapping[str, tuple[tuple[int, ...], torch.dtype]]
COUNTER = "num_batches_tracked"  # BatchNorm's step counter: old files (torchvision's 2017 weights) lack it


class PairingError(CheckpointError):
    """The file's tensors do not pair with the model's: ``reason`` names the first tensor of each side."""

    def __init__(self, source: str, reason: str, hint: str) -> None:
        self.reason, self.hint = reason, hint
        super().__init__(f"{source} does not pair with this model by structure: {reason}\n  hint: {hint}")


HINT = ("build the model the weights were made for (torchvision's: model.in_channels=3; vit_b_16 at 224x224 for its "
        "position embedding), or give init.map={old.*:new.*} to pair by name")

# Only the file's last tensors left over: its head, which a model without one (n_classes: null) lacks.
HEADLESS_HINT = ("the file's last tensors are a head this model lacks (n_classes: null): load the file into the "
                 "whole model, then copy its state_dict into the backbone (own-project.md, Backbones)")


@dataclass(frozen=True)
class Pairing:
    """Which tensor of the file goes into which of the model (model name -> file name), and what was left out."""

    pairs: dict[str, str]
    head: tuple[tuple[str, str], ...] = ()  # (model name, file name) of a head with other outputs: left at init
    counters_missing: tuple[str, ...] = ()  # the model's BatchNorm step counters, which the file does not hold
    unused: tuple[str, ...] = ()  # the file's last tensors, past the model's end (a head, later stages): not loaded


def shapes_of(state: Mapping[str, torch.Tensor]) -> dict[str, tuple[tuple[int, ...], torch.dtype]]:
    return {name: (tuple(t.shape), t.dtype) for name, t in state.items()}


def kind(name: str) -> str:
    leaf = name.rsplit(".", 1)[-1]
    if leaf in ("running_mean", "running_var", COUNTER):
        return leaf
    return "bias" if leaf.endswith("bias") else "weight"


def _key(name: str, shape: tuple[tuple[int, ...], torch.dtype]) -> tuple[str, tuple[int, ...], torch.dtype]:
    return (kind(name), *shape)


def _module(name: str) -> str:
    return name.rsplit(".", 1)[0] if "." in name else ""


def _shown(name: str, shapes: Shapes) -> str:
    return f"{name} {list(shapes[name][0])}"


def pair_by_structure(file: Shapes, model: Shapes, source: str = "the file") -> Pairing:
    """Pair the tensors of ``file`` with those of ``model`` (names -> (shape, dtype), each in state_dict order).

    Raises:
        PairingError: a tensor without a partner (other than the head), or pairs that split a module;
            the message names the tensors of both sides.
    """
    counters = tuple(n for n in model if n.rsplit(".", 1)[-1] == COUNTER)
    skipped = counters if counters and not any(n.rsplit(".", 1)[-1] == COUNTER for n in file) else ()
    wanted = [n for n in model if n not in skipped]
    queues: dict[tuple, list[str]] = {}
    for name in file:
        queues.setdefault(_key(name, file[name]), []).append(name)
    pairs: dict[str, str] = {}
    for name in wanted:
        queue = queues.get(_key(name, model[name]))
        if queue:
            pairs[name] = queue.pop(0)
    taken = set(pairs.values())
    left_model = [n for n in wanted if n not in pairs]
    left_file = [n for n in file if n not in taken]
    unused: tuple[str, ...] = ()
    if left_file and not left_model and left_file == list(file)[len(file) - len(left_file):]:
        unused, left_file = tuple(left_file), []  # the model ends earlier than the file's network
    head = _head(left_model, left_file, wanted, list(file), model, file)
    if head is None:
        file_head = not left_model and left_file == list(file)[len(file) - len(left_file):]
        raise PairingError(source, _unpaired(left_model, left_file, model, file), HEADLESS_HINT if file_head else HINT)
    _check_modules(pairs, model, file, source)
    return Pairing(pairs, head, skipped, unused)


def _head(left_model: list[str], left_file: list[str], model_order: list[str], file_order: list[str],
          model: Shapes, file: Shapes) -> tuple[tuple[str, str], ...] | None:
    """The unpaired tensors as a head of other outputs (possibly none), or None when they are not one."""
    n = len(left_model)
    if not left_file and left_model == model_order[len(model_order) - n:]:
        return ()  # the file holds no head (init.map dropped it): the model's stays as initialized
    if n != len(left_file) or left_model != model_order[len(model_order) - n:] or left_file != file_order[len(file_order) - n:]:
        return None
    for ours, theirs in zip(left_model, left_file):
        (our_shape, our_dtype), (their_shape, their_dtype) = model[ours], file[theirs]
        if (kind(ours), len(our_shape), our_shape[1:], our_dtype) != (kind(theirs), len(their_shape), their_shape[1:],
                                                                       their_dtype):
            return None
    return tuple(zip(left_model, left_file))


def _unpaired(left_model: list[str], left_file: list[str], model: Shapes, file: Shapes) -> str:
    sides = []
    if left_file:
        sides.append(f"{len(left_file)} of its {len(file)} tensors have no partner of their kind and shape in the "
                     f"model, the first {_shown(left_file[0], file)}")
    if left_model:
        sides.append(f"{len(left_model)} of the model's {len(model)} have none in the file, the first "
                     f"{_shown(left_model[0], model)}")
    return "; ".join(sides)


def _check_modules(pairs: Mapping[str, str], model: Shapes, file: Shapes, source: str) -> None:
    """Each module of the file goes into one module of the model, and no two into the same one."""
    into: dict[str, str] = {}
    from_: dict[str, str] = {}
    first: dict[str, str] = {}
    for ours, theirs in pairs.items():
        ours_mod, theirs_mod = _module(ours), _module(theirs)
        if into.setdefault(theirs_mod, ours_mod) != ours_mod or from_.setdefault(ours_mod, theirs_mod) != theirs_mod:
            earlier = first.get(theirs_mod) if into[theirs_mod] != ours_mod else next(
                o for o, t in pairs.items() if _module(o) == ours_mod and _module(t) == from_[ours_mod])
            raise PairingError(source, f"its {_shown(theirs, file)} pairs with the model's {_shown(ours, model)}, "
                               f"but {_shown(pairs[earlier], file)} with {_shown(earlier, model)}: the two would split "
                               "or merge a module", "give init.map={old.*:new.*} to pair the file's tensors by name")
        first.setdefault(theirs_mod, ours)

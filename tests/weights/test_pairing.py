"""Pairing a file's tensors with a model's by structure (modelforge.weights.pairing), on small real modules."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from modelforge.errors import CheckpointError
from modelforge.weights.pairing import PairingError, kind, pair_by_structure, shapes_of
from tests.helpers.pairing_models import Ours, ScaleFirst


def test_tensors_pair_by_kind_and_shape_in_order_whatever_their_names_and_nesting() -> None:
    pairing = pair_by_structure(shapes_of(ScaleFirst().state_dict()), shapes_of(Ours().state_dict()))
    assert pairing.pairs == {
        "stem.0.weight": "conv.weight", "stem.0.bias": "conv.bias",
        # four [4] vectors of one norm: weight, bias and its two statistics, kept apart by their kind
        "stem.1.weight": "norm.weight", "stem.1.bias": "norm.bias", "stem.1.running_mean": "norm.running_mean",
        "stem.1.running_var": "norm.running_var", "stem.1.num_batches_tracked": "norm.num_batches_tracked",
        "gamma.weight": "scale", "fc.weight": "head.weight", "fc.bias": "head.bias"}
    assert pairing.head == () and pairing.counters_missing == ()
    assert [kind(n) for n in ("a.bias", "a.in_proj_bias", "a.running_var", "a.weight", "token")] == [
        "bias", "bias", "running_var", "weight", "weight"]


def test_a_head_of_other_outputs_is_left_out_and_named() -> None:
    pairing = pair_by_structure(shapes_of(ScaleFirst(n_out=1000).state_dict()), shapes_of(Ours(n_out=10).state_dict()))
    assert pairing.head == (("fc.weight", "head.weight"), ("fc.bias", "head.bias"))
    assert "fc.weight" not in pairing.pairs and len(pairing.pairs) == 8


def test_a_file_without_batchnorm_step_counters_pairs_the_rest() -> None:
    old = {k: v for k, v in ScaleFirst().state_dict().items() if not k.endswith("num_batches_tracked")}
    pairing = pair_by_structure(shapes_of(old), shapes_of(Ours().state_dict()))
    assert pairing.counters_missing == ("stem.1.num_batches_tracked",) and len(pairing.pairs) == 9


def test_a_tensor_without_partner_is_one_error_naming_both_sides() -> None:
    class Wider(Ours):
        def __init__(self) -> None:
            super().__init__()
            self.stem[0] = nn.Conv1d(3, 4, 5)  # another kernel: the file's conv.weight fits nowhere

    with pytest.raises(PairingError, match=r"^F does not pair with this model by structure: 1 of its 10 tensors have "
                                           r"no partner of their kind and shape in the model, the first conv.weight "
                                           r"\[4, 3, 3\]; 1 of the model's 10 have none in the file, the first "
                                           r"stem.0.weight \[4, 3, 5\]\n  hint: "):
        pair_by_structure(shapes_of(ScaleFirst().state_dict()), shapes_of(Wider().state_dict()), source="F")


def test_pairs_that_would_split_a_module_are_refused() -> None:
    """Two Linear layers of one shape, their biases listed in the other order: each pairs by shape, but
    a.weight would go with b.bias's module."""
    file = {"a.weight": torch.zeros(3, 3), "b.weight": torch.zeros(3, 3), "b.bias": torch.zeros(3),
            "a.bias": torch.zeros(3)}
    model = nn.Sequential(nn.Linear(3, 3), nn.Linear(3, 3)).state_dict()
    with pytest.raises(CheckpointError, match=r"its b.bias \[3\] pairs with the model's 0.bias \[3\], but a.weight "
                                              r"\[3, 3\] with 0.weight \[3, 3\]: the two would split or merge a module"):
        pair_by_structure(shapes_of(file), shapes_of(model), source="F")


def test_a_file_without_its_head_leaves_the_models_head_unpaired() -> None:
    """init.map={head.*: null} drops the file's head: the model's own stays as initialized."""
    headless = {k: v for k, v in ScaleFirst().state_dict().items() if not k.startswith("head.")}
    pairing = pair_by_structure(shapes_of(headless), shapes_of(Ours().state_dict()))
    assert len(pairing.pairs) == 8 and "fc.weight" not in pairing.pairs and pairing.head == ()

"""``.safetensors`` files wherever a state_dict file loads: ``init.from`` and ``load_model`` (issue 41)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from modelforge import CheckpointError, build_model, load_model
from modelforge.train.transfer import apply_transfer
from modelforge.weights import save_safetensors
from tests.helpers.pairing_models import Ours, ScaleFirst

CNN = {"name": "cnn", "enc_sizes": [8]}


def test_a_safetensors_file_loads_through_init_from(tmp_path: Path) -> None:
    trained = build_model(CNN, seed=1)
    save_file(trained.state_dict(), tmp_path / "weights.safetensors")  # as timm and the hub write them
    model = build_model(CNN, seed=2)
    transfer = apply_transfer({"init": {"from": str(tmp_path / "weights.safetensors"), "strict": True}}, model)
    assert transfer.init.loaded == tuple(model.state_dict())
    assert all(torch.equal(trained.state_dict()[k], v) for k, v in model.state_dict().items())


@pytest.mark.parametrize("cut", [0, 7, 100, -8])
def test_a_truncated_safetensors_file_is_one_error_naming_it(cut: int, tmp_path: Path) -> None:
    whole = tmp_path / "whole.safetensors"
    save_file(build_model(CNN).state_dict(), whole)
    data = whole.read_bytes()
    cut_file = tmp_path / "cut.safetensors"
    cut_file.write_bytes(data[:cut] if cut >= 0 else data[:cut])
    with pytest.raises(CheckpointError, match=rf"^init.from: {cut_file} is not a readable .safetensors file \(Error "
                                              r"while deserializing header: [^\n]*\): cut short, or another format with "
                                              r"this suffix$"):
        apply_transfer({"init": {"from": str(cut_file)}}, build_model(CNN))


def test_a_model_saved_as_safetensors_loads_with_load_model(tmp_path: Path) -> None:
    model = build_model(CNN, seed=3)
    model.model_config = CNN  # as load_model gives it: the config that builds it
    path = save_safetensors(model, tmp_path / "model.safetensors")
    loaded = load_model(path)
    assert all(torch.equal(model.state_dict()[k], v) for k, v in loaded.state_dict().items())
    assert loaded.modelforge_meta["class_names"] == [str(k) for k in range(10)] and not loaded.training


def test_pairing_by_structure_needs_the_order_a_safetensors_file_keeps_only_when_modelforge_wrote_it(
        tmp_path: Path) -> None:
    """safetensors sorts tensors by name: ScaleFirst's scale then comes after conv, and two norms' vectors can swap."""
    source = ScaleFirst()
    save_file(source.state_dict(), tmp_path / "sorted.safetensors")
    with pytest.raises(CheckpointError, match=r"nor does it pair by structure: a .safetensors file keeps its tensors "
                                              r"sorted by name, not in the order they were registered in"):
        apply_transfer({"init": {"from": str(tmp_path / "sorted.safetensors")}}, Ours())
    save_safetensors(source, tmp_path / "ordered.safetensors")  # its header keeps the state_dict order
    model = Ours()
    transfer = apply_transfer({"init": {"from": str(tmp_path / "ordered.safetensors"), "strict": True}}, model)
    assert transfer.init.paired and torch.equal(model.gamma.weight, source.scale)

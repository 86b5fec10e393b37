"""torchvision files into what the language writes (issue 49): integer buffers the language keeps as constants
(Swin's relative_position_index) are checked for equality and skipped, not refused; a full model's file loads into
a model without its head, or one that ends at a feature map, the rest of the file named as not loaded."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from modelforge import CheckpointError, create_model
from modelforge.train.transfer import apply_transfer
from tests.helpers.parity import randomize, torchvision_models

tv_models = torchvision_models()

SWIN = ["in_channels=3", "n_classes=1000", "input_size=[72,72]", "params.dim=24"]  # swin_t at a quarter width


@pytest.fixture(scope="module")
def swin_file(tmp_path_factory: pytest.TempPathFactory) -> tuple[torch.nn.Module, Path]:
    """torchvision's swin_t at embed_dim 24 (random weights), saved as a state_dict: relative_position_index too."""
    from torchvision.models.swin_transformer import SwinTransformer

    torch.manual_seed(0)
    reference = SwinTransformer([4, 4], 24, [2, 2, 6, 2], [3, 6, 12, 24], [7, 7], stochastic_depth_prob=0.2)
    with torch.no_grad():
        for parameter in reference.parameters():
            parameter.normal_(0.0, 0.1)
    path = tmp_path_factory.mktemp("swin") / "swin_t-random.pth"
    torch.save(reference.state_dict(), path)
    assert sum(k.endswith("relative_position_index") for k in reference.state_dict()) == 12
    return reference.eval(), path


def test_torchvisions_swin_t_file_loads_and_gives_its_outputs_exactly(swin_file: tuple[torch.nn.Module, Path]) -> None:
    reference, path = swin_file
    model = create_model("swin_t", SWIN)
    transfer = apply_transfer({"init": {"from": str(path), "strict": True}}, model)
    total = len(model.state_dict())
    lines = transfer.lines(model)
    assert lines[0] == (f"init.from: loaded {total} of the model's {total} tensors from {path} (paired by structure: "
                        "the file's names are not the model's)")
    assert lines[1].startswith("init.from: 12 integer buffers of the file equal the model's constants (made from its "
                               "config, not saved), checked and skipped: features.1.0.attn.relative_position_index")
    assert transfer.record(model)["init"]["constants"]["count"] == 12
    x = torch.randn(2, 3, 72, 72)
    with torch.no_grad():
        expected, got = reference(x), model.eval()(x)
    assert (expected[0] - expected[1]).abs().max() > 1e-3
    assert (got - expected).abs().max().item() == 0.0


def test_an_index_that_is_not_the_models_constant_is_refused(swin_file: tuple[torch.nn.Module, Path],
                                                             tmp_path: Path) -> None:
    _, path = swin_file
    state = torch.load(path, weights_only=True)
    state["features.1.0.attn.relative_position_index"] = state["features.1.0.attn.relative_position_index"].flip(0)
    torch.save(state, tmp_path / "bad.pth")
    with pytest.raises(CheckpointError, match=r"features.1.0.attn.relative_position_index \[2401\]"):
        apply_transfer({"init": {"from": str(tmp_path / "bad.pth")}}, create_model("swin_t", SWIN))


def test_a_full_file_loads_into_a_feature_map_model_and_names_what_it_left(
        swin_file: tuple[torch.nn.Module, Path]) -> None:
    reference, path = swin_file
    model = create_model("swin_t", SWIN, features=["stage2"])
    transfer = apply_transfer({"init": {"from": str(path)}}, model)
    total = len(model.state_dict())
    lines = transfer.lines(model)
    assert lines[0].startswith(f"init.from: loaded {total} of the model's {total} tensors")
    unused = [k for k in reference.state_dict() if k.split(".")[0] in ("norm", "head") or (
        k.startswith("features.") and int(k.split(".")[1]) >= 4)]
    unused = [k for k in unused if not k.endswith("relative_position_index")]
    assert lines[1] == (f"init.from: {len(unused)} in the file but not in this model, ignored: {unused[0]}, "
                        f"{unused[1]}, {unused[2]}, ... ({len(unused) - 3} more)")
    x = torch.randn(2, 3, 72, 72)
    with torch.no_grad():
        expected = reference.features[:4](x)
        got = model.eval()(x)["stage2"]
    assert (got - expected).abs().max().item() == 0.0


def test_a_full_resnet18_file_loads_into_the_headless_model(tmp_path: Path) -> None:
    torch.manual_seed(0)
    reference = tv_models.resnet18(weights=None)
    x = torch.randn(2, 3, 64, 64)
    randomize(reference, x)
    torch.save(reference.state_dict(), tmp_path / "resnet18.pth")
    backbone = create_model("resnet18", ["in_channels=3", "n_classes=null", "input_size=[64,64]"])
    transfer = apply_transfer({"init": {"from": str(tmp_path / "resnet18.pth")}}, backbone)
    assert transfer.lines(backbone)[1] == "init.from: 2 in the file but not in this model, ignored: fc.weight, fc.bias"
    reference.fc = torch.nn.Identity()
    with torch.no_grad():
        assert (backbone.eval()(x) - reference.eval()(x)).abs().max().item() == 0.0

"""torchvision's weights are checked against the model before they are downloaded (a run on MNIST's one channel,
a cnn), and a cache torch.hub cannot use is named as the cause; a headless model's backbone pairs, so its
download goes ahead. Real processes and real folders (an unwritable TORCH_HOME, a folder where the file goes)."""

from __future__ import annotations

from pathlib import Path

import pytest

from modelforge import CheckpointError, create_model
from modelforge.train.transfer import apply_transfer
from modelforge.weights.hub import cache_path, fetch
from modelforge.weights.torchvision_zoo import torchvision_weights
from tests.conftest import run_cli


def test_weights_that_cannot_pair_are_refused_before_any_download(tmp_path: Path, tiny_data: Path) -> None:
    env = {"TORCH_HOME": str(tmp_path / "torch"), "MODELFORGE_DATA": str(tiny_data)}
    for model, weights in (("resnet50", "resnet50"), ("cnn", "resnet18")):
        result = run_cli("train", f"model={model}", f"init.from=torchvision:{weights}", f"data.data_dir={tiny_data}",
                         f"hydra.run.dir={tmp_path / model}", env=env)
        assert result.returncode == 2, result.stdout + result.stderr
        first = result.stderr.splitlines()[0]
        assert first.startswith(f"error: init.from: torchvision:{weights}.IMAGENET1K_")
        assert "would not load into this model, so it was not downloaded" in first
        assert "Traceback" not in result.stderr and not (tmp_path / model).exists()
    assert not list((tmp_path / "torch").rglob("*.pth*"))


def test_a_headless_model_passes_the_check_before_the_download(monkeypatch: pytest.MonkeyPatch,
                                                                tmp_path: Path) -> None:
    # Its backbone pairs with the file's first tensors (the file's head is left out, named as skipped when it
    # loads: tests/weights/test_constants_and_backbones.py), so the check lets the download go ahead: offline here,
    # the download's own error is what stops it.
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch"))
    backbone = create_model("resnet18", ["in_channels=3", "n_classes=null", "input_size=[224,224]"])
    with pytest.raises(CheckpointError) as refused:
        apply_transfer({"init": {"from": "torchvision:resnet18"}}, backbone)
    assert "would not load into this model" not in str(refused.value)
    assert str(refused.value).startswith("init.from: cannot download torchvision:resnet18.IMAGENET1K_V1")


def test_a_torch_home_that_cannot_hold_a_folder_is_named_as_the_cause(monkeypatch: pytest.MonkeyPatch,
                                                                     tmp_path: Path) -> None:
    (tmp_path / "torch").write_text("a file, not a folder")
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch"))
    with pytest.raises(CheckpointError, match=rf"^init.from: cannot make torch.hub's cache folder {tmp_path}/torch/hub/"
                       r"checkpoints \(.*\) to download torchvision:resnet18.IMAGENET1K_V1 into: set TORCH_HOME to a "
                       "folder you can write$"):
        fetch(torchvision_weights("torchvision:resnet18"))


def test_a_folder_where_the_file_goes_is_named(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch"))
    weights = torchvision_weights("torchvision:resnet18")
    cache_path(weights).mkdir(parents=True)
    with pytest.raises(CheckpointError, match=rf"^init.from: {cache_path(weights)}, where torch.hub keeps "
                       r"resnet18-f37072fd.pth, is not a file \(a folder"):
        fetch(weights)

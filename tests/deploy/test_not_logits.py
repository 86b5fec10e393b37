"""Models whose output is not a classifier's scores: a feature-map model (a dict of maps) is refused by export
before anything is written, and predict refuses a headless model's features (read as 128 "classes" before), in
a real process, with one line and no file left."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from modelforge import ConfigError, create_model
from modelforge.deploy.export import export
from modelforge.deploy.predict import predict
from modelforge.errors import ExportError
from tests.conftest import run_cli


def test_export_refuses_a_feature_map_model_before_writing(tmp_path: Path) -> None:
    model = create_model("resnet18", features=["layer2", "layer4"])
    with pytest.raises(ExportError, match=r"^graph returns a dict of layer2, layer4, not one tensor: .*nothing "
                       "was written"):
        export(model, "pt2", tmp_path / "features.pt2", n_images=4)
    assert list(tmp_path.iterdir()) == []


def test_predict_refuses_a_feature_map_model(tmp_path: Path) -> None:
    model = create_model("resnet18", features=["layer4"])
    model.modelforge_meta = {"input_shape": [1, 28, 28], "normalize": None, "class_names": [str(k) for k in range(10)]}
    with pytest.raises(ConfigError, match=r"^ckpt_path: graph returns a dict, not one tensor of class scores"):
        predict(model, torch.zeros(2, 28, 28, dtype=torch.uint8))


def test_predict_refuses_a_headless_models_features(tmp_path: Path, tiny_data: Path) -> None:
    backbone = create_model("cnn", ["n_classes=null"])  # 128 features out of its decoder
    # a backbone exports (it is one tensor), checked on the tiny IDX set's test images
    exported = export(backbone, "pt2", tmp_path / "headless.pt2", n_images=4, data_dir=tiny_data)
    Image.fromarray((np.arange(28 * 28) % 256).astype(np.uint8).reshape(28, 28)).save(tmp_path / "digit.png")
    output = tmp_path / "out" / "predictions.csv"
    result = run_cli("predict", f"ckpt_path={exported}", f"inputs={tmp_path / 'digit.png'}", f"output={output}")
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    assert result.stderr.splitlines()[0] == (
        f"error: ckpt_path: cnn from {exported} (torch.export program) outputs [N, 128], not the scores of its 10 "
        "classes (0, 1, 2, ...): predict reads a classifier's scores")
    assert not output.parent.exists()

"""Any graph builds without a head (issue 39.1): ``n_classes: null`` leaves the head out, the class-count check
is where a classifier is trained, and ``create_model`` takes Hydra's own override syntax."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from modelforge import ConfigError, build_model, create_model
from modelforge.models.heads import check_classifier_output

# zoo model: its pooled features without the head, at 1x28x28
HEADLESS = {"resnet18": [512], "resnet34": [512], "resnet50": [2048], "convnext_tiny": [768], "vit_b_16": [768],
            "mobilenet_v3_small": [1024], "efficientnet_b0": [1280], "lenet5": [84], "lstm": [128], "vit_tiny": [64],
            "yolov8_cls": [1280], "cnn": [128], "mlp": [128], "seed_cnn": [1024]}
SMALLER = {"vit_b_16": ["params.depth=1"], "convnext_tiny": ["nodes.stage3.repeat=1"]}  # the same head, built faster


@pytest.mark.parametrize("name", sorted(HEADLESS))
def test_n_classes_null_builds_any_zoo_model_without_its_head(name: str) -> None:
    model = create_model(name, ["n_classes=null", *SMALLER.get(name, [])], seed=0)
    assert list(model.output_shape) == HEADLESS[name]
    with torch.no_grad():
        assert list(model.eval()(torch.zeros(2, 1, 28, 28)).shape) == [2, *HEADLESS[name]]
    with pytest.raises(ConfigError, match=r"gives \d+ values per sample, but the data has 10 classes"):
        check_classifier_output(model, 10)


def test_the_headless_model_is_the_model_less_its_head() -> None:
    full, headless = create_model("resnet18", seed=0), create_model("resnet18", ["n_classes=null"], seed=0)
    x = torch.randn(3, 1, 28, 28)
    features = {k: v for k, v in full.state_dict().items() if not k.startswith("nodes.fc.")}
    assert features.keys() == headless.state_dict().keys()
    assert all(torch.equal(v, headless.state_dict()[k]) for k, v in features.items())  # the same draws: fc was last
    full.eval(), headless.eval()
    with torch.no_grad():
        assert torch.equal(full.nodes.fc(headless(x)), full(x))


def test_a_graph_that_ends_at_a_feature_map_builds_at_any_size() -> None:
    # at 32x32 layer4 is 4x4 (a 3x3 stem), at 224x224 7x7 (torchvision's 7x7 stem and max-pool from 64 px)
    for side, reduction in ((32, 8), (224, 32)):
        model = create_model("resnet18", [f"input_size=[{side},{side}]", "~nodes.pool", "~nodes.flat", "~nodes.fc"])
        size = side // reduction
        assert model.output_node == "layer4" and model.output_shape == (512, size, size)
        with pytest.raises(ConfigError, match=rf"model.nodes.layer4: the output node 'layer4' gives \[512, "
                                              rf"{size}, {size}\] per sample, but a classifier of 10"):
            check_classifier_output(model, 10)


def test_hydra_override_syntax_deletes_and_adds_model_keys() -> None:
    assert create_model("resnet18", ["~nodes.fc"]).output_shape == (512,)
    added = create_model("resnet18", ["+nodes.act={block: nn.ReLU}"])
    assert list(added.nodes)[-1] == "act" and added.output_shape == (10,)


@pytest.mark.parametrize(("override", "lines"), [
    ("~nodes.flatt", ["nodes.flatt: cannot delete it: model 'resnet18' has no key 'flatt' at 'nodes'",
                      "  did you mean 'flat'?"]),
    ("nodes.flatt.block=nn.ReLU", ["nodes.flatt.block: cannot override it: model 'resnet18' has no key 'flatt' at "
                                   "'nodes'", "  did you mean 'flat'?"]),
    ("+n_classes=3", ["n_classes: model 'resnet18' already has 'n_classes'", "  hint: set it without '+': n_classes=..."]),
    ("nodes.fc.args.out_features=[1", ["nodes.fc.args.out_features=[1: no viable alternative at input '[1'"]),
])
def test_a_refused_override_names_the_key_as_written(override: str, lines: list[str]) -> None:
    with pytest.raises(ConfigError) as caught:
        create_model("resnet18", [override])
    assert str(caught.value).splitlines()[:len(lines)] == lines


def test_a_classifier_module_refuses_a_model_without_a_head() -> None:
    from modelforge.train.module import ClassifierModule

    with pytest.raises(ConfigError, match=r"model.nodes.flat: the output node 'flat' gives 512 values per sample, "
                                          r"but the data has 10 classes \(model.n_classes\)"):
        ClassifierModule(create_model("resnet18", ["n_classes=null"]), config={})
    with pytest.raises(ConfigError, match=r"model.features: the model returns the feature maps \['layer4'\]"):
        ClassifierModule(create_model("resnet18", features=["layer4"]), config={})


def test_train_refuses_a_headless_graph_before_any_work(tmp_path: Path, run_main) -> None:
    result = run_main("train", "model=resnet18", "~model.nodes.fc", "trainer.fast_dev_run=true",
                      f"hydra.run.dir={tmp_path / 'run'}")
    assert result.returncode == 2
    assert result.stderr.splitlines()[0] == ("error: model.nodes.flat: the output node 'flat' gives 512 values per "
                                             "sample, but the data has 10 classes (model.n_classes)")
    assert not (tmp_path / "run" / "metrics.json").exists()


def test_n_classes_null_in_a_run_takes_the_data_class_count() -> None:
    from modelforge.data.shapes import fill_model_shapes

    class Data:
        input_shape, n_classes = (1, 28, 28), 10

    cfg = fill_model_shapes({"name": "cnn", "n_classes": None}, Data())
    assert cfg["n_classes"] == 10 and build_model(cfg).output_shape == (10,)

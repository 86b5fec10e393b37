"""compose_model_config: the model config create_model builds, composed anew on every call (real Hydra, real files),
and the config a built model carries."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from hydra.core.config_search_path import ConfigSearchPath
from hydra.core.config_store import ConfigStore
from hydra.core.plugins import Plugins
from hydra.plugins.search_path_plugin import SearchPathPlugin

import modelforge
from modelforge import build_model, compose_model_config, create_model
from modelforge.weights import save_safetensors
from modelforge.weights.safetensors_file import read_safetensors_file

MODEL_FILE = """defaults:
  - /model_defaults/graph@_here_
  - _self_
name: graph
nodes:
  flat: {{block: flatten}}
  fc: {{block: linear, args: {{out_features: {width}}}}}
"""


def fc_width(model: torch.nn.Module) -> int:
    return model.nodes.fc.linear.out_features


class _PluginFolder(SearchPathPlugin):
    """A Hydra SearchPathPlugin that adds one folder, as a user's installed plugin package does."""

    folder: Path | None = None

    def manipulate_search_path(self, search_path: ConfigSearchPath) -> None:
        if self.folder is not None:
            search_path.append("mf-test-plugin", f"file://{self.folder}")


@pytest.fixture
def plugin_folder(tmp_path: Path) -> Iterator[Path]:
    """A config folder that Hydra finds through a registered SearchPathPlugin (taken out again afterwards)."""
    (tmp_path / "model").mkdir()
    _PluginFolder.folder = tmp_path
    plugins = Plugins.instance()
    plugins.register(_PluginFolder)
    try:
        yield tmp_path
    finally:
        _PluginFolder.folder = None
        for registered in plugins.plugin_type_to_subclass_list.values():
            if _PluginFolder in registered:
                registered.remove(_PluginFolder)
        plugins.class_name_to_class.pop(f"{_PluginFolder.__module__}.{_PluginFolder.__name__}", None)


def test_create_model_carries_the_config_it_was_built_from() -> None:
    composed = compose_model_config("resnet18")
    model = modelforge.create_model("resnet18")
    assert model.model_config == composed
    assert model.model_config["name"] == "graph" and "layer4" in model.model_config["nodes"]
    rebuilt = build_model(model.model_config, seed=0)
    assert rebuilt.state_dict().keys() == model.state_dict().keys()


def test_compose_once_build_many() -> None:
    cfg = compose_model_config("mlp", ["hidden_sizes=[8]"])
    assert cfg["name"] == "mlp" and cfg["hidden_sizes"] == [8]
    first, second = build_model(cfg, seed=0), build_model(cfg, seed=1)
    assert first.model_config == second.model_config == cfg
    assert not torch.equal(first.hidden[0].linear.weight, second.hidden[0].linear.weight)  # two models, drawn apart
    first.model_config["hidden_sizes"].append(4)  # a model's copy is its own
    assert cfg["hidden_sizes"] == [8] and second.model_config["hidden_sizes"] == [8]


def test_build_model_carries_its_config_and_save_safetensors_keeps_it(tmp_path: Path) -> None:
    model = build_model({"name": "mlp", "hidden_sizes": [4]}, seed=0)
    assert model.model_config == {"name": "mlp", "hidden_sizes": [4]}
    path = save_safetensors(model, tmp_path / "mlp.safetensors")  # no config handed in
    assert read_safetensors_file(path)["hyper_parameters"]["config"]["model"] == model.model_config


def test_a_model_file_rewritten_between_two_calls_is_read_again(plugin_folder: Path) -> None:
    path = plugin_folder / "model" / "plugged.yaml"
    path.write_text(MODEL_FILE.format(width=8))
    assert fc_width(create_model("plugged")) == 8
    path.write_text(MODEL_FILE.format(width=9))  # same size, likely the same stamp: nothing is kept to go stale
    assert fc_width(create_model("plugged")) == 9


def test_a_config_store_node_changed_in_place_is_seen() -> None:
    store = ConfigStore.instance()
    store.store(group="model", name="stored_mlp", node={"name": "mlp", "hidden_sizes": [16]})
    try:
        assert create_model("stored_mlp").hidden[0].linear.out_features == 16
        store.repo["model"]["stored_mlp.yaml"].node.hidden_sizes[0] = 4  # the stored node itself, edited
        assert create_model("stored_mlp").hidden[0].linear.out_features == 4
    finally:  # the model group's options are the shipped ones for the tests after this one (--help lists them)
        store.repo["model"].pop("stored_mlp.yaml", None)


def test_a_refused_override_names_the_key() -> None:
    with pytest.raises(modelforge.ConfigError, match="hidden_sizez"):
        compose_model_config("mlp", ["hidden_sizez=[4]"])

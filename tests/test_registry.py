"""Registry behaviour and the built-in names that `import modelforge` registers.

These pass whatever `modelforge.plugins` entry points are installed: built-in names are
asserted as a subset, and per-name checks run over `names(plugins=False)`.
tests/test_registry_plugins.py runs this file with a plugin installed.
"""

from __future__ import annotations

import pytest
import yaml
from torch import nn

import modelforge
from modelforge.config import conf_dir
from modelforge.errors import ModelforgeError, UnknownNameError
from modelforge.registry import REGISTRIES, Registry

EXPECTED = {
    "activations": {"relu", "lrelu", "prelu", "gelu", "silu", "elu", "selu", "tanh", "sigmoid", "identity"},
    "blocks": {"conv", "linear", "pool", "flatten", "global_avg_pool", "dropout", "activation", "add", "concat"},
    "models": {"cnn", "seed_cnn", "mlp", "graph"},
    "initializers": {"default", "kaiming_normal", "kaiming_uniform", "xavier_normal", "xavier_uniform",
                     "normal", "orthogonal", "constant"},
    "hooks": {"verbose", "grad_clip", "feature_capture", "grad_monitor", "ablate", "input_noise", "grad_cam",
              "activation_stats"},
    "optimizers": {"adam", "adamw", "sgd", "rmsprop", "nadam", "adagrad", "lbfgs"},
    "schedulers": {"none", "onecycle", "cosine", "warmup_cosine", "step", "multistep", "exponential", "plateau"},
    "datamodules": {"mnist", "fashion_mnist", "idx"},
}
# Lightning's callbacks and loggers are config options with a _target_, not registry names: the
# registries hold only classes that plugins add (test_callbacks_loggers.py builds each option).
SHIPPED_OPTIONS = {
    "callbacks": {"early_stopping", "lr_monitor", "rich_progress_bar", "model_summary", "swa", "timer",
                  "rich_model_summary", "device_stats", "ema"},
    "logger": {"csv", "tensorboard", "mlflow", "wandb", "comet"},
}


@pytest.mark.parametrize("registry", sorted(EXPECTED))
def test_builtin_names_exist_after_import(registry: str) -> None:
    assert EXPECTED[registry] <= set(modelforge.REGISTRIES[registry].names())


@pytest.mark.parametrize("registry", sorted(EXPECTED))
def test_each_registry_is_a_top_level_name(registry: str) -> None:
    assert getattr(modelforge, registry.upper()) is REGISTRIES[registry]
    assert registry.upper() in modelforge.__all__


@pytest.mark.parametrize("registry", sorted(EXPECTED))
def test_every_name_has_a_description(registry: str) -> None:
    reg = REGISTRIES[registry]
    names = reg.names(plugins=False)  # a plugin's descriptions are its own business
    assert EXPECTED[registry] <= set(names)
    assert all(reg.describe(name) for name in names), [n for n in names if not reg.describe(n)]


def test_taken_name_is_an_error_unless_forced() -> None:
    reg = Registry("things", "test")
    reg.add("a", nn.ReLU)
    with pytest.raises(ModelforgeError, match="'a' is already registered.*force=True"):
        reg.add("a", nn.GELU)
    reg.add("a", nn.GELU, force=True)
    assert reg.get("a") is nn.GELU


def test_registry_holds_factories_not_instances() -> None:
    with pytest.raises(TypeError, match="classes or factories"):
        Registry("things", "test").add("x", 3)


def test_unknown_name_names_registry_key_path_and_suggests() -> None:
    with pytest.raises(UnknownNameError) as info:
        modelforge.ACTIVATIONS.get("gelu2", path="model.activation")
    message = str(info.value)
    assert message.startswith("model.activation: unknown activation 'gelu2'")
    assert "did you mean 'gelu'?" in message
    allowed = next(line for line in message.splitlines() if line.startswith("  allowed: "))
    names = allowed.removeprefix("  allowed: ").split(", ")
    assert names == sorted(names) and EXPECTED["activations"] <= set(names)
    assert set(names) == set(modelforge.ACTIVATIONS.names())  # plugin names are allowed too


def test_lookup_accepts_a_callable() -> None:
    assert modelforge.ACTIVATIONS.get(nn.Hardswish) is nn.Hardswish


def test_a_deferred_name_is_listed_and_described_without_importing_its_module() -> None:
    reg: Registry = Registry("things", "test")
    reg.add_deferred("ordered", "collections:OrderedDict", "a dict that keeps its order")
    reg.add_deferred("missing", "no_such_module_anywhere:Thing", "never imported by listing")
    assert reg.names() == ["missing", "ordered"] and reg.describe("missing") == "never imported by listing"
    import collections

    assert reg.get("ordered") is collections.OrderedDict  # the lookup imports it, once
    with pytest.raises(ModuleNotFoundError):
        reg.get("missing")


def test_the_builtin_data_modules_are_the_classes_their_names_defer_to() -> None:
    from modelforge.data.datamodule import FashionMNISTDataModule, IdxDataModule, MNISTDataModule

    assert [modelforge.DATAMODULES.get(n) for n in ("mnist", "fashion_mnist", "idx")] == [
        MNISTDataModule, FashionMNISTDataModule, IdxDataModule]
    for name, cls in (("mnist", MNISTDataModule), ("fashion_mnist", FashionMNISTDataModule), ("idx", IdxDataModule)):
        assert modelforge.DATAMODULES.describe(name) == cls.__doc__.splitlines()[0]  # one wording


def test_glob_filter() -> None:
    assert modelforge.BLOCKS.names("con*", plugins=False) == ["concat", "constant", "conv"]
    matched = modelforge.BLOCKS.names("con*")
    assert {"concat", "conv"} <= set(matched) and all(n.startswith("con") for n in matched)


def test_names_registered_by_entry_points_are_marked() -> None:
    for registry in REGISTRIES.values():
        for name in set(registry.names()) - set(registry.names(plugins=False)):
            assert registry.plugin_of(name)
        assert all(registry.plugin_of(n) is None for n in registry.names(plugins=False))


@pytest.mark.parametrize("group", sorted(SHIPPED_OPTIONS))
def test_each_shipped_callback_and_logger_option_names_an_allowed_lightning_class(group: str) -> None:
    from hydra.utils import get_class

    from modelforge.train.callbacks import ALLOWED_MODULES

    files = {f.stem: yaml.safe_load(f.read_text()) for f in (conf_dir() / group).glob("*.yaml")}
    assert set(files) == SHIPPED_OPTIONS[group]
    for name, cfg in files.items():
        module, _, cls = cfg["_target_"].rpartition(".")
        assert module == ALLOWED_MODULES[group] and isinstance(get_class(cfg["_target_"]), type), name

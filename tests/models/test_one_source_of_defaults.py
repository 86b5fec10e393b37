"""One source of defaults: the constructor signature.

For every built-in model and every shipped ``conf/model/*.yaml``, the YAML file
given to ``build_model`` and the CLI's ``model=<option>`` (composed by Hydra)
build the same model; ``build_model({"name": X})`` is the constructor's defaults.
"""

from __future__ import annotations

import dataclasses
import inspect
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir
from torch import nn

from modelforge import MODELS, ConfigError, build_model
from modelforge.build import model_config_from_run
from modelforge.config import conf_dir, schema_defaults
from modelforge.models import CNN, MLP, build_graph, seed_cnn
from modelforge.models.param_cap import PARAM_CAP_OPTION

BUILTIN_MODELS = {"cnn": CNN, "seed_cnn": seed_cnn, "mlp": MLP, "graph": build_graph}
SHIPPED = sorted(p.stem for p in (conf_dir() / "model").glob("*.yaml"))
# zoo models whose file composes through Hydra (it takes blocks/ or another model file), the largest ones
SAME_CONFIG_IS_ENOUGH = {"convnext_tiny", "efficientnet_b0", "maxvit_t", "mobilenet_v3_small", "resnet34", "resnet50",
                         "swin_t", "vit_b_16", "yolov8_cls"}


def _compose_model(option: str, *overrides: str) -> dict:
    with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
        cfg = compose("train", overrides=[f"model={option}", *overrides])
    return model_config_from_run(cfg)


def assert_same_model(a: nn.Module, b: nn.Module) -> None:
    assert repr(a) == repr(b)
    sa, sb = a.state_dict(), b.state_dict()
    assert {k: v.shape for k, v in sa.items()} == {k: v.shape for k, v in sb.items()}
    different = [k for k in sa if not torch.equal(sa[k], sb[k])]
    assert not different, different


def test_every_builtin_model_has_a_shipped_config() -> None:
    assert set(BUILTIN_MODELS) <= set(SHIPPED)
    assert set(BUILTIN_MODELS) <= set(MODELS.names())


@pytest.mark.parametrize("option", SHIPPED)
def test_yaml_file_and_cli_option_build_the_same_model(option: str) -> None:
    from_file = build_model(conf_dir() / "model" / f"{option}.yaml", seed=0)
    from_cli = _compose_model(option)
    if option in SAME_CONFIG_IS_ENOUGH:
        # the file was composed by Hydra into the very config the CLI composes; build_model draws a model from its
        # config and seed alone (resnet18 and unet, composed the same way, are built both ways and their weights
        # compared), so a second build of these (seconds each) pins nothing more
        assert from_file.model_config == from_cli
    else:
        assert_same_model(from_file, build_model(from_cli, seed=0))
    # A classifier gives its classes; the image-to-image models of the tasks (docs/tasks.md) a map or an image.
    expected = {"unet": (2, 10, 28, 28), "autoencoder": (2, 1, 28, 28)}.get(option, (2, 10))
    # the shape only: on the meta device, no arithmetic (vit_b_16's and maxvit_t's forward took seconds)
    with torch.no_grad(), torch.device("meta"):
        assert from_file.to("meta")(torch.zeros(2, *from_file.input_shape)).shape == expected


@pytest.mark.parametrize("option", SHIPPED)
def test_shipped_yaml_holds_only_name_and_commented_overrides(option: str) -> None:
    text = (conf_dir() / "model" / f"{option}.yaml").read_text()
    extends = [line.strip()[2:] for line in text.splitlines() if line.strip().startswith("- ") and "/" not in line]
    # starts from the signature's defaults, itself or through the model file it extends (resnet34: resnet18)
    assert "/model_defaults/" in text or any(
        "/model_defaults/" in (conf_dir() / "model" / f"{e}.yaml").read_text() for e in extends if e != "_self_")
    # the model language's own tables describe the architecture; they override no default
    architecture = ("defaults", "name", "nodes", "blocks", "params", "scales", "heads")
    for line in text.splitlines():
        key = line.split(":")[0]
        if line and not line[0].isspace() and not line.startswith(("#", "-")) and key not in architecture:
            assert "#" in line or key == "init", f"override without a comment saying why: {line!r}"


@pytest.mark.parametrize("name", sorted(BUILTIN_MODELS))
def test_name_alone_builds_the_constructor_defaults(name: str) -> None:
    factory = BUILTIN_MODELS[name]
    if name == "graph":  # no default graph: `nodes` is required by both
        with pytest.raises(ConfigError, match=r"model.nodes: missing: model 'graph' needs 'nodes'"):
            build_model({"name": "graph"})
        with pytest.raises(TypeError, match="nodes"):
            factory()
        return
    torch.manual_seed(0)
    direct = factory()
    assert_same_model(build_model({"name": name}, seed=0), direct)


@pytest.mark.parametrize("name", sorted(set(BUILTIN_MODELS) - {"graph"}))  # graph: `nodes` has no default
def test_name_alone_equals_the_cli_option(name: str) -> None:
    assert_same_model(build_model({"name": name}, seed=0), build_model(_compose_model(name), seed=0))


@pytest.mark.parametrize("name", sorted(BUILTIN_MODELS))
def test_schema_is_the_signature(name: str) -> None:
    schema = MODELS.schema(name)
    params = {k: p.default for k, p in inspect.signature(BUILTIN_MODELS[name]).parameters.items() if k != "path"}
    fields = {f.name for f in dataclasses.fields(schema)}
    builder_options = {} if "max_params" in params else PARAM_CAP_OPTION  # read by the builder, not the factory
    assert fields == {"name", *params, *builder_options}
    defaults = schema_defaults(schema)
    assert all(defaults[key] == default for key, (_, default) in builder_options.items())
    for key, default in params.items():
        expected = "???" if default is inspect.Parameter.empty else default
        if isinstance(expected, tuple):
            expected = list(expected)
        assert defaults[key] == expected, key


def test_seed_cnn_differences_are_the_variant_defaults() -> None:
    cnn, seed = schema_defaults(MODELS.schema("cnn")), schema_defaults(MODELS.schema("seed_cnn"))
    differ = {k: (cnn[k], seed[k]) for k in cnn if cnn[k] != seed[k]}
    assert differ == {
        "name": ("cnn", "seed_cnn"),
        "dec_sizes": ([128], [1024]),
        "pool": ("max", None),
        "padding": (None, 1),
        "dropout": (0.25, 0.0),
        "init": ({"conv": "kaiming_normal", "linear": "default", "bias": "default", "norm": "default"}, None),
    }


def test_cli_can_still_override_every_option_without_plus() -> None:
    cfg = _compose_model("cnn", "model.kernel_size=5", "model.init.linear=xavier_normal", "enc_sizes=[8]")
    assert cfg["init"]["linear"] == "xavier_normal"
    model = build_model(cfg)
    assert model.encoder[0].conv.kernel_size == (5, 5) and len(model.encoder) == 1


def test_defaults_entry_other_than_the_signature_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "m.yaml"
    path.write_text("defaults:\n  - /model_defaults/cnn@_here_\n  - other\n  - _self_\nname: cnn\n")
    with pytest.raises(ConfigError, match=r"cannot compose \['other'\]"):
        build_model(path)

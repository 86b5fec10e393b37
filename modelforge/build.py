"""The one place where a model config meets the registries and becomes an ``nn.Module``."""

from __future__ import annotations

import contextlib
import copy
import dataclasses
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig
from torch import nn

from modelforge.config import load_config, validate
from modelforge.errors import ConfigError, UnknownKeyError
from modelforge.layers.initializers import INIT_RULES, initialize, make_initializer
from modelforge.layers.kwargs import accepted_kwargs, check_kwargs
from modelforge.models.conf_store import DEFAULTS_GROUP
from modelforge.models.definitions import ModelFiles
from modelforge.registry import MODELS

MAX_PARAMS_KEY = "max_params"


def _check_init(init: Mapping[str, Any], path: str) -> None:
    for key, spec in init.items():
        if key not in INIT_RULES:
            raise UnknownKeyError(f"{path}.{key}", key, f"no init rule {key!r}", INIT_RULES)
        make_initializer(spec, f"{path}.{key}")


@contextlib.contextmanager
def naming_definitions(files: ModelFiles | None = None, path: str = "model") -> Iterator[None]:
    """An error inside a composite block gets the file and line that define the block (``files``: those of
    the model; None: the error stands as it is, for an enclosing call that knows them)."""
    try:
        yield
    except ConfigError as exc:
        where = files.locate(exc.path, path) if files is not None else None
        if where is None or "defined at" in exc.problem:
            raise
        exc.problem = f"{exc.problem} (defined at {where})"
        exc.args = (str(ConfigError(exc.path, exc.problem, allowed=exc.allowed, suggestions=exc.suggestions,
                                    hint=exc.hint)),)
        raise


def _feature_names(features: Sequence[str], name: Any) -> list[str]:
    if isinstance(features, str) or not all(isinstance(f, str) for f in features):
        raise ConfigError("features", f"expected a list of node names, got {features!r}",
                          hint='e.g. features=["layer2", "layer3", "layer4"]')
    schema = MODELS.schema(name) if name in MODELS else None
    if schema is not None and "features" not in {f.name for f in dataclasses.fields(schema)}:
        raise ConfigError("features", f"model {name!r} has no named nodes to return",
                          hint="feature maps come from graph models (the zoo's resnet18, resnet50, convnext_tiny, ...)")
    return list(features)


def validate_model_config(cfg: Mapping[str, Any], path: str = "model") -> Any:
    """Check a model config (plain mapping) and return its filled schema instance (or dict)."""
    with naming_definitions(path=path):
        return _validated(cfg, path)


def _validated(cfg: Mapping[str, Any], path: str) -> Any:
    if "name" not in cfg:
        raise ConfigError(f"{path}.name", "missing: which model to build", allowed=MODELS.names())
    name = cfg["name"]
    factory = MODELS.get(name, path=f"{path}.name")
    schema = MODELS.schema(name)
    if schema is None:  # a plugin model without a schema: check options against its signature
        options = {k: v for k, v in cfg.items() if k not in ("name", "init")}
        check_kwargs(factory, options, path, f"model {name!r}")
        _check_init(cfg.get("init") or {}, f"{path}.init")
        return dict(cfg)
    checked = validate(cfg, schema, path, f"model {name!r}")
    _check_init(checked.init or {}, f"{path}.init")
    return checked


def model_config_keys(name: str) -> set[str]:
    """The keys a model's config takes (for CLI shortcuts like ``enc_sizes=...``)."""
    schema = MODELS.schema(name)
    if schema is not None:
        return {f.name for f in dataclasses.fields(schema)}
    from modelforge.layers.kwargs import accepted_kwargs

    return set(accepted_kwargs(MODELS.get(name)) or ()) | {"name", "init"}


def build_model(cfg: Mapping[str, Any] | DictConfig | str | Path, *, seed: int | None = None,
                features: Sequence[str] | None = None) -> nn.Module:
    """Build the model a config describes and apply its weight init.

    The model is what the config describes, whatever its output: whether it fits a classifier is checked
    where one is trained (:func:`modelforge.models.heads.check_classifier_output`).

    Args:
        cfg: a model config (``{name: cnn, enc_sizes: [32, 64], ...}``) as a dict,
            an OmegaConf config or a YAML file path. A full run config with a
            ``model`` key is accepted too.
        seed: when given, weights are drawn from this seed without disturbing
            the caller's global random state: same seed, same weights.
        features: names of a graph model's nodes (``["layer2", "layer3", "layer4"]``): the model returns a dict
            of their outputs, ``model.feature_info`` gives each one's channels and reduction, and nodes none of
            them needs are not built (the graph option ``features``).

    The model carries the config it was built from (a plain dict) as ``model.model_config``.
    """
    plain = load_config(cfg)
    if "name" not in plain and isinstance(plain.get("model"), Mapping):
        plain = dict(plain["model"])
    if isinstance(cfg, (str, Path)) and _foreign_defaults(plain) and Path(cfg).parent.name == "model":
        # a model file of a config folder whose defaults take blocks/ or another model file: Hydra composes it
        path = Path(cfg).resolve()
        return create_model(path.stem, config_dir=path.parent.parent, seed=seed, features=features)
    if features is not None:
        plain["features"] = _feature_names(features, plain.get("name"))
    plain = drop_signature_defaults(plain, str(cfg) if isinstance(cfg, (str, Path)) else "model")
    files = ModelFiles(str(cfg), ()) if isinstance(cfg, (str, Path)) else None
    with naming_definitions(files):
        checked = validate_model_config(plain)
    model = build_checked_model(checked, seed=seed, files=files)
    model.model_config = copy.deepcopy(plain)  # as load_model's: save_safetensors(model, path) keeps it
    return model


def compose_model_config(name: str, overrides: Sequence[str] = (), *,
                         config_dir: str | Path | None = None) -> dict[str, Any]:
    """The model config that ``create_model(name, overrides, config_dir=...)`` builds, composed by Hydra.

    Compose once, build many: ``cfg = compose_model_config("resnet18", ["n_classes=null"])``, then
    ``build_model(cfg, seed=s)`` for each model. Each call composes anew (about 0.1 s), so it reads the config
    files and Hydra's ConfigStore as they are now. The arguments are those of :func:`create_model`.
    """
    from modelforge.models.compose import compose_model

    folders = _config_folders(config_dir)
    run_cfg = compose_model(name, list(overrides), folders)
    with naming_definitions(ModelFiles(name, folders)):
        return model_config_from_run(run_cfg)


def _config_folders(config_dir: str | Path | None) -> tuple[Path, ...]:
    """conf/ and then the user's folder: Hydra's order, as ``--config-dir`` is searched after conf/."""
    from modelforge.config import conf_dir

    return (conf_dir(), *([Path(config_dir).resolve()] if config_dir is not None else []))


def create_model(
    name: str,
    overrides: Sequence[str] = (),
    *,
    config_dir: str | Path | None = None,
    seed: int | None = None,
    features: Sequence[str] | None = None,
) -> nn.Module:
    """Build a model config by name, composed by Hydra as ``model=<name>`` is on the command line.

    ``create_model("resnet18")``, ``create_model("yolov8_cls", ["scale=s", "n_classes=1000"])``:
    ``overrides`` are keys of the model config, in Hydra's syntax (``~nodes.flat`` deletes, ``+key=...`` adds).
    ``create_model("resnet18", ["n_classes=null"])``: the model without its head (pooled features).
    ``config_dir``: a folder of your own configs (``model/``, ``blocks/``), searched after the shipped ones, as
    ``--config-dir`` is (a file of it named as a shipped one is refused: it would never be read).
    ``features``: see :func:`build_model`.

    It is :func:`compose_model_config` then :func:`build_model`: to build many models of one config, compose
    once and build many times. The model carries the config it was built from as ``model.model_config``.
    """
    model_cfg = compose_model_config(name, overrides, config_dir=config_dir)
    with naming_definitions(ModelFiles(name, _config_folders(config_dir))):
        return build_model(model_cfg, seed=seed, features=features)


def build_checked_model(checked: Any, *, seed: int | None = None, files: ModelFiles | None = None) -> nn.Module:
    """:func:`build_model` of a config that :func:`validate_model_config` returned (not checked again);
    ``files``: where the model's composites are written, for errors."""
    values = dict(checked) if isinstance(checked, Mapping) else {
        f.name: getattr(checked, f.name) for f in dataclasses.fields(checked)  # no deep copy: plain values
    }
    name = values.pop("name")
    factory = MODELS.get(name)
    accepted = accepted_kwargs(factory) or ()
    init = {} if "init" in accepted else values.pop("init", None) or {}
    if MAX_PARAMS_KEY not in accepted:  # a schema's option the factory does not take: cnn and mlp check their
        values.pop(MAX_PARAMS_KEY, None)  # size from their options, with the config (param_cap.check_sizes)
    with torch.random.fork_rng(devices=[]), naming_definitions(files):
        if seed is not None:
            torch.manual_seed(seed)
        model = factory(**values)
        if init:  # models that take `init` applied it themselves
            initialize(model, init)
    return model


def _foreign_defaults(cfg: Mapping[str, Any]) -> list[Any]:
    """A model file's defaults entries other than its own signature defaults (``/model_defaults/<name>``)."""
    name = cfg.get("name")
    own = {"_self_", f"{DEFAULTS_GROUP}/{name}@_here_", f"/{DEFAULTS_GROUP}/{name}@_here_"}
    return [d for d in cfg.get("defaults") or [] if d not in own]


def drop_signature_defaults(cfg: dict[str, Any], where: str) -> dict[str, Any]:
    """A shipped model YAML without its ``defaults`` list (the signature's defaults, which
    :func:`build_model` fills in anyway); any other defaults entry needs Hydra to compose."""
    if "defaults" not in cfg:
        return cfg
    others = _foreign_defaults(cfg)
    if others:
        raise ConfigError(f"{where}: defaults", f"build_model reads one file; it cannot compose {others}",
                          hint="compose the config with Hydra, then pass the model config")
    return {k: v for k, v in cfg.items() if k != "defaults"}


def model_label(cfg: Mapping[str, Any], files: ModelFiles | None = None) -> str:
    """How a run names its model: ``cnn``, or the model file a graph was composed from (``resnet18``,
    ``configs/my.yaml`` -> ``my``) with its scale (``yolov8_cls (scale s)``). ``files``: the model option it was
    composed from (without them, a graph is ``graph``)."""
    name = str(cfg.get("name"))
    label = Path(files.model).stem if files is not None and name == "graph" else name
    return f"{label} (scale {cfg['scale']})" if cfg.get("scales") and cfg.get("scale") is not None else label


def model_config_from_run(run_cfg: Mapping[str, Any] | DictConfig) -> dict[str, Any]:
    """The model config of a full run config, with CLI shortcuts (``enc_sizes=...``) merged in."""
    from modelforge.config import apply_model_shortcuts

    plain = load_config(run_cfg)
    model = plain.get("model") or {}
    name = model.get("name")
    if name is None:
        raise ConfigError("model.name", "missing: which model to build", allowed=MODELS.names())
    MODELS.get(name, path="model.name")
    return apply_model_shortcuts(plain, model_config_keys(name))

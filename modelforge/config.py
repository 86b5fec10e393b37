"""Config schemas and their validation, done before anything is built.

A schema is a dataclass whose fields are the allowed keys, whose annotations
are the allowed types and whose ``check(path)`` method holds the rules types
cannot say (positive sizes, kernels that fit). Errors carry the config path.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import importlib
import inspect
import os
import pkgutil
import re
import typing
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from modelforge.conf_folder import PACKAGE_DIR, conf_dir, config_groups  # noqa: F401  (re-exported)
from modelforge.config_types import check_type, implied_type, type_name
from modelforge.errors import ConfigError, UnknownKeyError, closest_names
from modelforge.files.yaml_files import (  # noqa: F401  (re-exported)
    bound_yaml_file,
    check_yaml_file,
    load_yaml_file,
    yaml_file_error,
)
from modelforge.registry import load_builtins, store_defaults

# Hydra and OmegaConf are imported where used (0.3-0.4 s): `list` imports this module to register the built-ins'
# names, and reads no config.
if TYPE_CHECKING:
    from omegaconf import DictConfig
    from omegaconf.errors import OmegaConfBaseException

S = TypeVar("S")

# Top-level keys of the CLI that are forwarded into the model config, so that
# `python -m modelforge train model=cnn enc_sizes=[32,64]` works as written.
MODEL_SHORTCUTS = ("enc_sizes", "dec_sizes", "activation")


def to_plain(cfg: Any) -> Any:
    """DictConfig/ListConfig -> resolved plain dicts and lists; other values unchanged."""
    from omegaconf import DictConfig, ListConfig, OmegaConf

    return OmegaConf.to_container(cfg, resolve=True) if isinstance(cfg, (DictConfig, ListConfig)) else cfg


def load_config(cfg: Mapping | DictConfig | str | Path) -> dict[str, Any]:
    """Accept a dict, an OmegaConf config or a YAML path (read by :func:`load_yaml_file`); return a plain dict."""
    plain = to_plain(load_yaml_file(cfg) if isinstance(cfg, (str, Path)) else cfg)
    if not isinstance(plain, Mapping):
        raise ConfigError("", f"a config must be a mapping, got {type(plain).__name__}")
    return dict(plain)


def omegaconf_error(exc: OmegaConfBaseException) -> ConfigError:
    """OmegaConf's refusal of a key or a value as one ConfigError: the key path, what was wrong, what is allowed."""
    from omegaconf import ListConfig
    from omegaconf.errors import ConfigAttributeError, ConfigKeyError, ValidationError

    path, node, parent = str(exc.full_key), exc.child_node, exc.parent_node
    if isinstance(exc, (ConfigKeyError, ConfigAttributeError)) and parent is not None:
        where, _, key = path.rpartition(".")
        return UnknownKeyError(path, key, f"no key {key!r} at "
                               + (f"'{where}'" if where else "the top level of the config"), sorted(str(k) for k in parent))
    if isinstance(exc, ValidationError) and (node is not None or isinstance(parent, ListConfig)):
        tp = node._metadata.ref_type if node is not None else parent._metadata.element_type
        expected = type_name(tp | None if node is not None and node._metadata.optional and tp is not Any else tp)
        return ConfigError(path, f"expected {expected}, got {type(exc.value).__name__} {exc.value!r}", allowed=expected)
    return ConfigError(path, str(exc.msg).split("\n")[0])


@functools.cache
def _type_hints(schema: type) -> dict[str, Any]:
    """A schema's resolved annotations (resolving them is most of a validation's time: a graph
    of 1,000 nodes validates 1,000 node configs against one schema)."""
    return typing.get_type_hints(schema)


def validate(values: Mapping[str, Any], schema: type[S], path: str, what: str) -> S:
    """Check ``values`` against a dataclass ``schema`` and return the filled instance.

    Unknown keys, wrong types and whatever the schema's ``check(path)`` rejects
    raise ConfigError naming ``path.key``.
    """
    fields = {f.name: f for f in dataclasses.fields(schema)}
    hints = _type_hints(schema)
    for key in values:
        if key not in fields:
            raise UnknownKeyError(f"{path}.{key}" if path else str(key), key, f"{what} has no option {key!r}",
                                  sorted(fields))
    for key, value in values.items():
        check_type(value, hints[key], f"{path}.{key}" if path else key)
    for key, f in fields.items():
        if key not in values and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise ConfigError(f"{path}.{key}" if path else key, f"missing: {what} needs {key!r}",
                              allowed=type_name(hints[key]))
    instance = schema(**values)
    if (check := getattr(instance, "check", None)) is not None:
        check(path)
    return instance


def _field_default(default: Any) -> dict[str, Any]:
    if default is inspect.Parameter.empty:
        return {}
    if isinstance(default, (list, dict, set)):  # dataclasses refuse shared mutable defaults
        return {"default_factory": functools.partial(copy.deepcopy, default)}
    return {"default": default}


def schema_from_signature(factory: Callable, name: str, *, check: Callable[[Any, str], None] | None = None,
                          exclude: Sequence[str] = (), extra: Mapping[str, tuple[Any, Any]] | None = None) -> type:
    """A config schema (dataclass) whose fields are ``factory``'s keyword parameters.

    The signature is the one home of every default: each field takes the
    parameter's annotation (``Any`` when it has none) and default (a parameter
    without one is a required key). A ``functools.partial`` gives a variant with
    other defaults. ``check(instance, path)`` holds the rules types cannot say.
    The field ``name`` (the registered name) comes first; ``extra``: options the builder reads rather
    than the factory (name -> (annotation, default)), last.
    """
    target = factory
    while isinstance(target, functools.partial):
        target = target.func
    hints = typing.get_type_hints(target.__init__ if isinstance(target, type) else target)
    fields: list[tuple[str, Any, Any]] = [("name", str, dataclasses.field(default=name))]
    for param in inspect.signature(factory).parameters.values():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD) or param.name in exclude:
            continue
        fields.append((param.name, hints.get(param.name, Any), dataclasses.field(**_field_default(param.default))))
    fields += [(key, tp, dataclasses.field(**_field_default(default))) for key, (tp, default) in (extra or {}).items()]
    where = f"{getattr(target, '__module__', '?')}.{getattr(target, '__qualname__', target)}"
    namespace = {"__doc__": f"Options of model {name!r}, read from the signature of {where}.",
                 **({"check": check} if check is not None else {})}
    return dataclasses.make_dataclass(f"{name}_config", fields, namespace=namespace, kw_only=True)


def _plain(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return {k: _plain(v) for k, v in value.items()} if isinstance(value, Mapping) else value


def schema_defaults(schema: type) -> dict[str, Any]:
    """The defaults a schema holds, as plain YAML-able values (tuples become lists; "???" where required)."""
    return {f.name: _plain(f.default if f.default is not dataclasses.MISSING
                           else "???" if f.default_factory is dataclasses.MISSING else f.default_factory())
            for f in dataclasses.fields(schema)}


def require_positive(values: Any, path: str, *, allow_empty: bool = False) -> None:
    """Sizes must be positive integers; lists of sizes must not be empty (unless allowed)."""
    if isinstance(values, (list, tuple)):
        if not values and not allow_empty:
            raise ConfigError(path, "must not be empty", allowed="a list of positive integers")
        for i, v in enumerate(values):
            if v <= 0:
                raise ConfigError(f"{path}[{i}]", f"must be positive, got {v}", allowed="integers >= 1")
    elif values <= 0:
        raise ConfigError(path, f"must be positive, got {values}", allowed="numbers > 0")


def require_probability(value: float, path: str) -> None:
    if not 0.0 <= value < 1.0:
        raise ConfigError(path, f"must be in [0, 1), got {value}", allowed="0 <= p < 1")


def apply_model_shortcuts(root: Mapping[str, Any], model_keys: set[str]) -> dict[str, Any]:
    """Return ``root['model']`` with the top-level shortcuts that were set merged in: an option of the model, or
    a graph model's parameter of that name (``params``).

    A shortcut the chosen model does not take is an error, not silently dropped.
    """
    model = dict(root.get("model") or {})
    for key in (k for k in MODEL_SHORTCUTS if root.get(k) is not None):
        params = model.get("params")
        if key not in model_keys and isinstance(params, Mapping) and key in params:
            model["params"] = {**params, key: root[key]}  # a graph's parameter of that name (unet's enc_sizes)
            continue
        if key not in model_keys:
            raise ConfigError(key, f"model {model.get('name')!r} does not take {key!r}",
                              allowed=sorted(model_keys - {"name"}),
                              hint=f"remove {key}=... or pick a model that has it (e.g. model=cnn)")
        model[key] = root[key]
    return model


@dataclasses.dataclass
class DivergenceConfig:
    # A non-finite train loss always stops the run (status "diverged", exit 3); so does one above max_loss.
    # Cross-entropy starts near ln(10) = 2.3: a loss of 1e4 means the weights blew up. null: only NaN/inf
    # stop. To find the operation that made a NaN: trainer.detect_anomaly=true.
    max_loss: float | None = 1.0e4


# Transfer learning (train/transfer.py reads it). `from` is a keyword: no generated __init__, __repr__ or __eq__,
# which would spell it as a name; OmegaConf reads only the fields. `map` is Any (transfer.py checks it):
# OmegaConf 2.3 cannot merge init.map={...} into a null typed dict (omry/omegaconf#1360).
InitConfig = dataclasses.dataclass(init=False, repr=False, eq=False)(type("InitConfig", (), {
    "__annotations__": {"from": "str | None", "map": "Any", "strict": "bool"},
    "from": None,  # a checkpoint, run dir or state_dict file: tensors whose names and shapes match load
    "map": None,  # the file's names -> the model's, by glob: init.map={head.*:classifier.*}; null drops
    "strict": False,  # true: refuse a file with any tensor missing, left over or of another shape
}))


@dataclasses.dataclass
class TrainConfig:
    """The train command's own keys and their defaults: ``conf/train.yaml`` takes it from Hydra's ConfigStore
    (``train_schema``), so OmegaConf types them as it composes; ``typed_train_config`` does so for a dict."""

    # Model shortcuts: set at the top level, forwarded into `model` (error if the model lacks the key).
    enc_sizes: list[int] | None = None
    dec_sizes: list[int] | None = None
    activation: Any = None
    seed: int | None = 0  # seeds python, numpy, torch and the data split
    monitor: str = "val/acc"  # best-checkpoint metric; train() returns it for sweepers
    ckpt_path: str | None = None  # resume from this checkpoint (a new run directory is made)
    label_smoothing: float = 0.0
    channels_last: bool = False  # NHWC convolutions (GPU speed-up)
    compile: bool = False  # torch.compile the model for training steps (after hook plugins attach; val/test run eagerly)
    compile_backend: str = "inductor"  # torch.compile's backend; aot_eager checks what dynamo captures, generating no code
    compile_mode: str | None = None  # inductor's mode: default, reduce-overhead (CUDA graphs), max-autotune, ...
    # Capture the whole training step (forward, backward, optimizer) in a CUDA graph and replay it per batch; the
    # ragged last training batch is left out (data.drop_last). Without a CUDA device the run trains eagerly.
    cuda_graph: bool = False
    divergence: DivergenceConfig | None = dataclasses.field(default_factory=DivergenceConfig)
    init: InitConfig | None = dataclasses.field(default_factory=InitConfig)  # not `model.init`, the init rule
    # Globs over parameter or module names: freeze=[encoder.*] (no grads, not optimized). Any: one glob may
    # stand alone, a union OmegaConf 2.3 cannot type (transfer.py checks it).
    freeze: Any = dataclasses.field(default_factory=list)
    freeze_bn: bool = True  # norm layers wholly inside `freeze` stay in eval mode: running statistics frozen too
    curves: bool = True  # draw RUN/learning_curves.png from logs/metrics.csv once the run has trained
    # What the model learns: the task group's config (conf/task/, checked by modelforge.tasks); null: classify.
    # A field here, not a group before train_schema, so that a task's file (after it) sets `monitor` too.
    task: Any = None


def _store_train_schema() -> None:
    from hydra.core.config_store import ConfigStore

    ConfigStore.instance().store(name="train_schema", node=TrainConfig, provider="modelforge")


store_defaults(_store_train_schema)  # on import, as the models' defaults


def typed_train_config(plain: Mapping[str, Any]) -> dict[str, Any]:
    """``plain`` with TrainConfig's keys merged in by OmegaConf, as at composition: defaults filled, types checked
    and converted. Other keys (groups, ``+key=...`` additions) pass as they are."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    keys = {f.name for f in dataclasses.fields(TrainConfig)}
    try:
        typed = OmegaConf.merge(TrainConfig, {k: v for k, v in plain.items() if k in keys})
    except OmegaConfBaseException as exc:
        raise omegaconf_error(exc) from None
    return {**plain, **OmegaConf.to_container(typed)}


# The train config's groups (conf/train.yaml's defaults): with TrainConfig's fields, the top-level keys train reads.
TRAIN_GROUPS = ("model", "data", "trainer", "optim", "sched", "logger", "hooks", "callbacks")


def train_keys() -> list[str]:
    """Every top-level key of a train config that modelforge reads."""
    return sorted([*TRAIN_GROUPS, *(f.name for f in dataclasses.fields(TrainConfig))])


def check_top_level_keys(cfg: Mapping[str, Any] | DictConfig, known: Collection[str], command: str) -> None:
    """Refuse a top-level key that ``command`` does not read: a typo added with ``+lable_smoothing=0.1`` would be
    stored in config.yaml and change nothing. Plugins read only their own options (``hooks.NAME``, ``data``,
    ``callbacks.NAME``), never a top-level key, so a key of the user's own is allowed only where an
    interpolation (``${key}``) reads it."""
    from omegaconf import DictConfig, OmegaConf

    unknown = [str(key) for key in cfg if key not in known]
    if not unknown:
        return
    read = _interpolated_names(OmegaConf.to_container(cfg, resolve=False) if isinstance(cfg, DictConfig) else cfg)
    for key in (k for k in unknown if k not in read):
        raise UnknownKeyError(key, key, f"{command} reads no top-level key {key!r}: it would be stored in config.yaml "
                              "and change nothing", sorted(known),
                              hint=lambda guess, key=key: (
                                  f"a key the config has is set without '+': {guess[0]}=..." if guess else
                                  f"leave it out; a key of your own stays only where an interpolation reads it "
                                  f"(${{{key}}})"))


def _interpolated_names(value: Any) -> set[str]:
    """The names inside the ``${...}`` interpolations of ``value`` (strings, lists and mappings, nested)."""
    if isinstance(value, str):
        return {name for body in re.findall(r"\$\{([^{}]*)\}", value) for name in re.findall(r"[A-Za-z_]\w*", body)}
    items = value.values() if isinstance(value, Mapping) else value if isinstance(value, (list, tuple)) else ()
    return set().union(*(_interpolated_names(item) for item in items))


def signature_defaults(factory: Callable, skip: Collection[str] = ()) -> dict[str, Any]:
    """Keyword parameters of ``factory`` and their defaults (``inspect.Parameter.empty`` if required)."""
    params = inspect.signature(factory).parameters.values()
    return {p.name: p.default for p in params
            if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name not in skip and p.name != "self"}


def check_call(factory: Callable, options: Mapping[str, Any], path: str, what: str,
               *, skip: Collection[str] = (), filled: Collection[str] = (), verb: str = "takes") -> None:
    """Raise a ConfigError for an unknown option, a missing required one, or a value of the wrong type.

    A value's type is the one its default implies (the annotations of torch and Lightning are too
    loose or too exotic to check). ``skip``: parameters modelforge passes itself (not options);
    ``filled``: required ones it fills.
    """
    try:
        params = signature_defaults(factory, skip)
        takes_any = any(p.kind is p.VAR_KEYWORD for p in inspect.signature(factory).parameters.values())
    except (TypeError, ValueError):  # no signature to check against
        return
    for key, value in options.items():
        if (where := _nested_target(value)) is not None:
            raise ConfigError(f"{path}.{key}{where}._target_", f"{what} takes plain values here, not a class to build "
                              f"({_target_of(value, where)!r}): hydra's instantiate would build it, unchecked")
        if key not in params and not takes_any:
            raise UnknownKeyError(f"{path}.{key}", key, f"{what} {verb} no option {key!r}", sorted(params))
        if value is not None and key in params:
            default = params[key]
            check_type(value, implied_type(default), f"{path}.{key}", hint=f"{what} has {key}={default!r} by default")
    for key, default in params.items():
        if default is inspect.Parameter.empty and key not in options and key not in filled:
            raise ConfigError(f"{path}.{key}", f"missing: {what} needs a value for {key!r}",
                              hint=f"add +{path}.{key}=VALUE")


def _nested_target(value: Any, where: str = "") -> str | None:
    """The path below ``value`` of a mapping that holds ``_target_`` (``""``: ``value`` itself), else None.
    Options are passed to ``hydra.utils.instantiate``, which builds any such mapping, recursively."""
    if isinstance(value, Mapping):
        if "_target_" in value:
            return where
        found = (_nested_target(v, f"{where}.{k}") for k, v in value.items())
    elif isinstance(value, (list, tuple)):
        found = (_nested_target(v, f"{where}[{i}]") for i, v in enumerate(value))
    else:
        return None
    return next((w for w in found if w is not None), None)


def _target_of(value: Any, where: str) -> str:
    for part in re.findall(r"\.([^.\[]+)|\[(\d+)\]", where):
        value = value[part[0]] if part[0] else value[int(part[1])]
    return str(value["_target_"])[:80]


def public_name(obj: Any, module: str) -> str:
    """``module.Name`` when ``module`` exports ``obj`` (``torch.optim.Adam``), else where it is defined."""
    exported = getattr(importlib.import_module(module), getattr(obj, "__name__", ""), None) is obj
    return f"{module}.{obj.__name__}" if exported else f"{obj.__module__}.{obj.__qualname__}"


def resolve_target(target: Any, path: str, module: str, registered: Iterable[Any], kind: type | None = None) -> Any:
    """What a config's ``_target_`` names, imported only if it lies under ``module`` or is ``registered``
    (by a plugin); with ``kind``, it must be a subclass of it. Checked before anything is constructed."""
    by_name = {public_name(obj, module): obj for obj in registered if callable(obj)}
    exported = [f"{module}.{n}" for n, obj in vars(importlib.import_module(module)).items()
                if isinstance(obj, type) and (kind is None or issubclass(obj, kind)) and not n.startswith("_")]
    allowed = f"{module}.<name>, or one registered by a plugin"
    last = {name.rsplit(".", 1)[-1]: name for name in [*exported, *by_name]}  # close by the name itself
    guess = [last[n] for n in closest_names(str(target).rsplit(".", 1)[-1], last)]
    if not isinstance(target, str) or not (target.startswith(module + ".") or target in by_name):
        raise ConfigError(f"{path}._target_", f"{target!r} is not a class modelforge may import",
                          suggestions=guess, allowed=allowed)
    try:  # pkgutil's resolver imports the module part and walks the attributes, as Hydra's instantiate does
        obj = by_name.get(target) or pkgutil.resolve_name(target)
    except (ImportError, ValueError, AttributeError):
        raise ConfigError(f"{path}._target_", f"cannot import {target!r}", allowed=allowed, suggestions=guess) from None
    if kind is not None and not (isinstance(obj, type) and issubclass(obj, kind)):
        raise ConfigError(f"{path}._target_", f"{target} is not a subclass of {public_name(kind, module)}")
    return obj


def user_cache_dir() -> Path | None:
    """``$XDG_CACHE_HOME`` when absolute (the XDG spec says to ignore a relative one), else ``~/.cache``;
    None when no home folder is known (no $HOME and no passwd entry, e.g. ``docker run --user 1234``)."""
    cache = os.environ.get("XDG_CACHE_HOME", "")
    try:
        return Path(cache) if os.path.isabs(cache) else Path.home() / ".cache"
    except RuntimeError:
        return None


# Whoever imports this module may compose conf/ with Hydra, which reads the defaults the built-ins store in its
# ConfigStore (model_defaults/, data_defaults/, hook_defaults/): registered here, as `import modelforge` once did.
load_builtins()

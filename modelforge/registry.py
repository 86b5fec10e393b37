"""Named registries: a dict of classes or factories plus a decorator to fill it.

Built-in names are registered by the explicit imports of :func:`load_builtins`, done the first time a
registry is listed or asked for a name it does not hold (or a public name of ``modelforge`` is used);
other packages add names through the ``modelforge.plugins`` entry point group, loaded likewise.
"""

from __future__ import annotations

import fnmatch
import importlib
import inspect
import logging
from collections.abc import Callable, Iterator
from importlib.metadata import entry_points
from typing import Any, Generic, TypeVar

from modelforge.errors import ModelforgeError, UnknownNameError

T = TypeVar("T", bound=Callable)

PLUGIN_GROUP = "modelforge.plugins"
log = logging.getLogger(__name__)


class Registry(Generic[T]):
    """A mapping from names to classes or factories (never instances)."""

    def __init__(self, name: str, description: str) -> None:
        self.name = name
        self.description = description
        self._entries: dict[str, T] = {}
        self._descriptions: dict[str, str] = {}
        self._schemas: dict[str, type] = {}
        self._plugin_of: dict[str, str] = {}  # name -> the entry point that registered it

    def register(
        self,
        name: str | None = None,
        *,
        force: bool = False,
        description: str | None = None,
        schema: type | None = None,
    ) -> Callable[[T], T]:
        """Decorator form of :meth:`add`; the name defaults to the object's ``__name__``."""

        def decorator(obj: T) -> T:
            self.add(name or obj.__name__, obj, force=force, description=description, schema=schema)
            return obj

        return decorator

    def add(
        self,
        name: str,
        obj: T,
        *,
        force: bool = False,
        description: str | None = None,
        schema: type | None = None,
    ) -> None:
        """Register ``obj`` under ``name``; a taken name is an error unless ``force``.

        ``schema`` is an optional dataclass of the options the name accepts in a config.
        """
        if not callable(obj):
            raise TypeError(f"registry {self.name!r} holds classes or factories, got {obj!r}")
        if force:  # the built-ins first, as ever: a name forced over one of them stays forced (none of them forces)
            _load_names()
        if name in self._entries and not force:
            raise ModelforgeError(
                f"{self.name} registry: name {name!r} is already registered to "
                f"{_qualname(self._entries[name])}; pass force=True to replace it"
            )
        self._entries[name] = obj
        self._descriptions[name] = description or _first_doc_line(obj)
        if _loading_plugin is not None:
            self._plugin_of[name] = _loading_plugin
        else:
            self._plugin_of.pop(name, None)
        if schema is not None:
            self._schemas[name] = schema
        else:
            self._schemas.pop(name, None)

    def add_deferred(self, name: str, target: str, description: str) -> None:
        """Register the class or factory at ``target`` (``"package.module:Name"``) under ``name``, imported on its
        first lookup: listing and describing names imports nothing (a built-in data module loads Lightning)."""
        self.add(name, _Deferred(target), description=description)

    def get(self, key: str | T, *, path: str = "") -> T:
        """Look up a name; a callable passes through unchanged.

        Raises:
            UnknownNameError: naming this registry, the key, the config path,
                the closest names and every valid name.
        """
        if callable(key) and not isinstance(key, str):
            return key
        if key not in self._entries:
            _load_names()
            load_plugins()
        if key not in self._entries:
            raise UnknownNameError(self.name.rstrip("s"), key, self._entries, path=path)
        entry = self._entries[key]
        if isinstance(entry, _Deferred):
            self._entries[key] = entry = entry.load()
        return entry

    def describe(self, name: str) -> str:
        if name not in self._descriptions:
            _load_names()
        return self._descriptions[name]

    def schema(self, name: str) -> type | None:
        """The config schema registered with ``name``, if any."""
        return self._schemas.get(name)

    def names(self, pattern: str = "*", *, plugins: bool = True) -> list[str]:
        """Sorted names, filtered by a glob; ``plugins=False`` leaves out names that
        ``modelforge.plugins`` entry points registered (the built-ins and names registered by import),
        and so loads no plugin: safe while ``modelforge`` itself is still being imported."""
        if plugins:
            _load_names()
            load_plugins()
        return sorted(
            n for n in self._entries
            if fnmatch.fnmatchcase(n, pattern) and (plugins or n not in self._plugin_of)
        )

    def plugin_of(self, name: str) -> str | None:
        """The ``modelforge.plugins`` entry point that registered ``name``, if one did."""
        return self._plugin_of.get(name)

    def __contains__(self, name: object) -> bool:
        if name not in self._entries:
            _load_names()
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        _load_names()
        return len(self._entries)

    def __repr__(self) -> str:
        return f"Registry({self.name!r}, {len(self)} names)"


class _Deferred:
    """Where a registered object lives, until a lookup imports it."""

    def __init__(self, target: str) -> None:
        self.target = target

    def load(self) -> Any:
        module, _, attr = self.target.partition(":")
        return getattr(importlib.import_module(module), attr)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:  # a registry holds callables
        return self.load()(*args, **kwargs)


def _first_doc_line(obj: object) -> str:
    doc = inspect.getdoc(obj) or ""
    return doc.strip().splitlines()[0] if doc.strip() else ""


def _qualname(obj: object) -> str:
    return f"{getattr(obj, '__module__', '?')}.{getattr(obj, '__qualname__', obj)}"


ACTIVATIONS: Registry = Registry("activations", "Non-linearities, chosen by key")
BLOCKS: Registry = Registry("blocks", "Layer blocks built from plain arguments")
MODELS: Registry = Registry("models", "Model builders, selected by model.name")
INITIALIZERS: Registry = Registry("initializers", "Weight initializers applied with model.apply")
HOOKS: Registry = Registry("hooks", "Hook plugins that look inside a running model")
OPTIMIZERS: Registry = Registry("optimizers", "Optimizers: torch.optim's, and any a plugin adds (optim._target_)")
SCHEDULERS: Registry = Registry("schedulers", "Learning-rate schedules: modelforge's planned ones and torch's (sched._target_)")
DATAMODULES: Registry = Registry("datamodules", "LightningDataModules, selected by data=<name> (data.name)")
CALLBACKS: Registry = Registry("callbacks", "Lightning callbacks, several at once: callbacks=[a,b]")
LOGGERS: Registry = Registry("loggers", "Lightning loggers, several at once: logger=[csv,tensorboard]")

REGISTRIES: dict[str, Registry] = {
    r.name: r for r in (ACTIVATIONS, BLOCKS, MODELS, INITIALIZERS, HOOKS, OPTIMIZERS, SCHEDULERS,
                        DATAMODULES, CALLBACKS, LOGGERS)
}

_plugins_loaded = False
_loading_plugin: str | None = None

# The modules whose import registers the built-in names (and stores their defaults in Hydra's ConfigStore), in
# the order ``import modelforge`` always imported them.
BUILTIN_MODULES = ("modelforge.hooks", "modelforge.layers", "modelforge.models", "modelforge.data.options",
                   "modelforge.train.optim")
_builtins_loaded = False
_loading = False
# While ``list`` loads the names alone (``load_builtins(defaults=False)``): the modules' ConfigStore steps, kept for
# the next ``load_builtins()``. Storing imports Hydra and OmegaConf (0.3-0.4 s), which listing names never needs.
_deferred_defaults: list[Callable[[], None]] | None = None


def load_builtins(*, defaults: bool = True) -> None:
    """Import :data:`BUILTIN_MODULES` once: deferred from ``import modelforge`` so that ``--help`` needs no torch.

    ``defaults=False`` (``python -m modelforge list``) registers the names but keeps their defaults out of Hydra's
    ConfigStore, so that neither Hydra nor OmegaConf is imported; any later ``load_builtins()`` stores them.
    """
    global _builtins_loaded, _loading, _deferred_defaults
    if _loading:  # a module being imported below may look a name up, or import modelforge.config, which calls this
        return
    if not _builtins_loaded:
        _loading = True
        if not defaults:
            _deferred_defaults = []
        try:  # on an error the next call tries again, and says again what failed
            for module in BUILTIN_MODULES:
                importlib.import_module(module)
        finally:
            _loading = False
        _builtins_loaded = True
    if defaults and _deferred_defaults is not None:
        steps, _deferred_defaults = _deferred_defaults, None
        for step in steps:
            step()


def _load_names() -> None:
    """What a registry's lookup loads: the built-ins, with their defaults unless ``list`` asked for names alone."""
    load_builtins(defaults=_deferred_defaults is None)


def store_defaults(step: Callable[[], None]) -> None:
    """Run ``step``, which stores a built-in's defaults in Hydra's ConfigStore, as its module is imported; while
    ``load_builtins(defaults=False)`` loads names alone, keep it for the next ``load_builtins()``."""
    if _loading and _deferred_defaults is not None:
        _deferred_defaults.append(step)
    else:
        step()


def load_plugins() -> None:
    """Import every ``modelforge.plugins`` entry point once, so their names register."""
    global _plugins_loaded, _loading_plugin
    if _plugins_loaded:
        return
    _plugins_loaded = True
    for ep in entry_points(group=PLUGIN_GROUP):
        _loading_plugin = ep.name
        try:
            loaded = ep.load()
            if callable(loaded) and not isinstance(loaded, type):
                loaded()  # an entry point may name a function that registers things
        except Exception as exc:  # a broken plugin must not break modelforge itself
            log.warning("modelforge plugin %r failed to load: %s", ep.name, exc)
        finally:
            _loading_plugin = None

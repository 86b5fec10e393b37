"""The hook plugin base: options, attach to a model, and a handle that removes everything.

A plugin is built once from its config and attached to one model at a time.
Attaching it again (to the same or another model) first removes the previous
attachment, so hooks never stack. Every torch ``RemovableHandle`` registered by
an attachment is kept in its :class:`HookHandle`; removing the handle removes
them all, leaving no hook of ours on any module or tensor.
"""

from __future__ import annotations

import abc
import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from torch import nn

from modelforge.errors import ConfigError
from modelforge.hooks.targets import Target, select_targets


@dataclass
class PluginOptions:
    """Options every plugin takes: which modules it applies to.

    ``layers`` holds exact module names (from ``named_modules()``), globs such as
    ``encoder.*`` or module type names such as ``Conv2d``; ``None`` means the
    plugin's default (see each plugin's docstring).
    """

    layers: list[str] | None = None

    def check(self, path: str) -> None:
        if self.layers is None:
            return
        if not self.layers:
            raise ConfigError(f"{path}.layers", "is empty: the plugin would apply to nothing",
                              hint="leave layers out (null) for the plugin's default, or drop the plugin")
        for i, pattern in enumerate(self.layers):
            if not pattern.strip():
                raise ConfigError(f"{path}.layers[{i}]", "is an empty pattern",
                                  allowed="a module name, a glob like 'encoder.*' or a type name like 'Conv2d'")


# Trainer precisions that scale the loss with a GradScaler (Lightning normalizes "16" to "16-mixed"):
# tensor hooks then see scaled gradients.
SCALED_PRECISIONS = ("16-mixed", "16")


def require_at_least(value: int | float, minimum: int | float, path: str) -> None:
    """A shared range rule for counts and thresholds in plugin options."""
    if value < minimum:
        raise ConfigError(path, f"must be >= {minimum}, got {value}", allowed=f"numbers >= {minimum}")


class HookHandle:
    """Removes every hook one :meth:`HookPlugin.attach` registered; also a context manager."""

    def __init__(self, plugin: HookPlugin, model: nn.Module, handles: list[Any]) -> None:
        self.plugin = plugin
        self.model = model
        self._handles = handles

    @property
    def attached(self) -> bool:
        return bool(self._handles)

    def remove(self) -> None:
        """Remove every registered hook; calling it again does nothing."""
        while self._handles:
            self._handles.pop().remove()

    def __enter__(self) -> HookHandle:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.remove()

    def __repr__(self) -> str:
        return f"HookHandle({self.plugin.name!r}, {len(self._handles)} hooks)"


class HookPlugin(abc.ABC):
    """Base of every hook plugin: a subclass names its options and registers its hooks.

    Subclasses set ``name`` (the registry key), ``Options`` (a dataclass derived
    from :class:`PluginOptions`) and ``default_targets`` (how ``layers: null`` picks
    modules: ``"leaves"``, ``"children"``, ``"with_params"`` or ``"model"``), and implement
    :meth:`_register`.
    """

    name: ClassVar[str] = "plugin"
    Options: ClassVar[type[PluginOptions]] = PluginOptions
    default_targets: ClassVar[str] = "leaves"
    needs_params: ClassVar[bool] = False  # gradient plugins: a target must own parameters
    needs_class_scores: ClassVar[bool] = False  # explains a classifier's predicted class: task=classify only
    pattern_key: ClassVar[str] = "layers"  # the option :meth:`patterns` reads (errors name it)

    def __init__(self, options: PluginOptions | None = None, *, path: str | None = None) -> None:
        self.path = path or f"hooks.{self.name}"
        self.options = options if options is not None else self.Options()
        self.options.check(self.path)
        self.step: int | None = None  # the trainer's global step, set by the callback when there is one
        # The trainer's running stage ("train", "sanity_check", "validate", "test", "predict"), set by the callback.
        self.stage: str | None = None
        self._handle: HookHandle | None = None

    def attach(self, model: nn.Module, *, run_dir: Path | None = None, logger: Any = None) -> HookHandle:
        """Register this plugin's hooks on ``model``; a previous attachment is removed first.

        Raises ConfigError (before any forward) when a ``layers`` pattern matches no module.
        """
        self.detach()
        targets = self.targets(model)
        handles: list[Any] = []
        try:
            self._register(targets, handles, run_dir=run_dir, logger=logger)
        except BaseException:
            for handle in handles:  # a half-done attachment must not leave hooks behind
                handle.remove()
            raise
        self._handle = HookHandle(self, model, handles)
        return self._handle

    def targets(self, model: nn.Module) -> list[Target]:
        """The modules of ``model`` this plugin would hook; ConfigError when a ``layers`` pattern matches none."""
        return select_targets(model, self.patterns(), default=self.default_targets,
                              path=f"{self.path}.{self.pattern_key}", needs_params=self.needs_params,
                              indexed=self.pattern_key == "layers")

    def detach(self) -> None:
        """Remove the current attachment, if any."""
        if self._handle is not None:
            self._handle.remove()
            self._handle = None

    @property
    def attached(self) -> bool:
        return self._handle is not None and self._handle.attached

    def patterns(self) -> list[str] | None:
        """The layer patterns :meth:`attach` selects targets with (default: ``options.layers``)."""
        return self.options.layers

    def check_precision(self, precision: str) -> None:
        """Refuse a trainer precision this plugin cannot work under (default: all are fine)."""

    def after_test_batch(self, model: nn.Module, batch: Any, batch_idx: int) -> None:
        """Called by the training callback after each test batch (``grad_cam`` draws there); default: nothing."""

    @abc.abstractmethod
    def _register(self, targets: list[Target], handles: list[Any], *, run_dir: Path | None, logger: Any) -> None:
        """Register hooks on ``targets``, appending every handle to ``handles`` as soon as it exists."""

    def __repr__(self) -> str:
        fields = ", ".join(f"{f.name}={getattr(self.options, f.name)!r}" for f in dataclasses.fields(self.options))
        return f"{type(self).__name__}({fields})"

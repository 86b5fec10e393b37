"""A registry entry for a class that lives behind a costly import (Lightning), imported on first use.

``import modelforge`` must not import Lightning, yet ``list callbacks`` and did-you-mean need the
names, and config checks need the class's signature: this factory knows the class by an
allow-listed (module, attribute) pair written in modelforge's source, never by a config value.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
from typing import Any


class LazyClass:
    """A factory that imports ``module.attr`` when first called or inspected.

    ``fixed`` keyword arguments are always passed and are not options a config may set;
    ``requires`` names the packages (any one of them) the class needs at run time.
    """

    def __init__(self, module: str, attr: str, description: str, *, requires: tuple[str, ...] = (),
                 **fixed: Any) -> None:
        self.module, self.attr, self.fixed, self.requires = module, attr, fixed, requires
        self.__doc__ = description
        self.__name__ = self.__qualname__ = attr
        self.__module__ = module

    def missing_package(self) -> str | None:
        """The package to install when none of ``requires`` is importable, else None."""
        if self.requires and not any(importlib.util.find_spec(name) for name in self.requires):
            return self.requires[0]
        return None

    def resolve(self) -> type:
        """The class itself (imports its module)."""
        return getattr(importlib.import_module(self.module), self.attr)

    @property
    def __signature__(self) -> inspect.Signature:
        signature = inspect.signature(self.resolve())
        return signature.replace(parameters=[p for p in signature.parameters.values() if p.name not in self.fixed])

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.resolve()(*args, **self.fixed, **kwargs)

    def __repr__(self) -> str:
        fixed = "".join(f", {k}={v!r}" for k, v in self.fixed.items())
        return f"LazyClass({self.module}.{self.attr}{fixed})"


def resolve_class(factory: Any) -> Any:
    """The class behind a registry entry (a LazyClass's target; anything else as is)."""
    return factory.resolve() if isinstance(factory, LazyClass) else factory

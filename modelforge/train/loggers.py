"""The ``logger`` group: one or several Lightning loggers by name (``logger=[csv,tensorboard]``).

Names resolve through the LOGGERS registry; a logger whose package is not installed is refused
before any work with the package to install. Where they write is filled in by modelforge
(the run directory) unless the config says otherwise.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pytorch_lightning.loggers import Logger

from modelforge.errors import ConfigError
from modelforge.lazy import LazyClass, resolve_class
from modelforge.options import check_call, signature_defaults
from modelforge.registry import LOGGERS


def _placement(name: str, run_dir: Path) -> dict[str, Any]:
    """Where a logger writes inside the run directory, as keyword arguments."""
    if name in ("csv", "tensorboard"):
        return {"save_dir": str(run_dir), "name": "logs", "version": ""}  # RUN/logs/
    if name == "mlflow":
        return {"tracking_uri": f"file:{run_dir / 'mlruns'}"}  # offline, inside the run
    return {"save_dir": str(run_dir)}


def logger_specs(logger_cfg: Any) -> dict[str, dict[str, Any]]:
    """``{name: options}`` from the ``logger`` config: null, ``{name: csv}`` (older runs) or ``{csv: {...}, ...}``."""
    if logger_cfg is None or logger_cfg is False:
        return {}
    if isinstance(logger_cfg, str):
        return {logger_cfg: {}}
    if not isinstance(logger_cfg, Mapping):
        raise ConfigError("logger", f"expected logger names, got {logger_cfg!r}", hint="logger=[csv,tensorboard]")
    if isinstance(logger_cfg.get("name"), str):
        options = dict(logger_cfg)
        return {options.pop("name"): options}
    return {name: dict(options or {}) for name, options in logger_cfg.items()}


def check_loggers(logger_cfg: Any, run_dir: Path = Path("RUN")) -> list[tuple[str, Any, dict[str, Any]]]:
    """Each logger's (name, factory, keyword arguments), checked: known name, package installed, options."""
    checked = []
    for name, options in logger_specs(logger_cfg).items():
        path = f"logger.{name}"
        factory = LOGGERS.get(name, path=path)
        missing = factory.missing_package() if isinstance(factory, LazyClass) else None
        if missing is not None:
            raise ConfigError(path, f"logger {name!r} needs the package {missing!r}, which is not installed",
                              hint=f"pip install {missing}")
        accepted = signature_defaults(resolve_class(factory))
        placed = {k: v for k, v in _placement(name, run_dir).items() if k in accepted and k not in options}
        check_call(factory, options, path, f"logger {name!r}", filled=placed)
        checked.append((name, factory, {**placed, **options}))
    return checked


def build_loggers(logger_cfg: Any, run_dir: Path) -> list[Logger]:
    """The loggers of ``logger_cfg``, writing under ``run_dir``; [] for none."""
    loggers = []
    for name, factory, kwargs in check_loggers(logger_cfg, run_dir):
        try:
            loggers.append(factory(**kwargs))
        except (ValueError, TypeError, ImportError, ModuleNotFoundError) as exc:
            raise ConfigError(f"logger.{name}", f"logger {name!r} refused its options: {exc}") from None
    return loggers

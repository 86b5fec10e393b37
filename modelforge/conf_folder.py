"""Where the shipped configs live and which groups they hold, with the standard library alone: ``--help`` lists
them without importing torch or Hydra."""

from __future__ import annotations

from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent


def conf_dir() -> Path:
    """The ``conf/`` directory: shipped as ``modelforge/conf`` in a wheel, top-level in a checkout."""
    for candidate in (PACKAGE_DIR / "conf", PACKAGE_DIR.parent / "conf"):
        if (candidate / "train.yaml").is_file():
            return candidate
    raise FileNotFoundError(f"modelforge's conf/ directory was not found next to {PACKAGE_DIR}; reinstall the package")


def config_groups() -> dict[str, list[str]]:
    """modelforge's config groups (folders of conf/) and their options. ``conf/hydra/`` is left out:
    it only adds options to Hydra's own groups (``hydra/launcher``, ...), which Hydra also lists."""
    return {group.name: sorted(p.stem for p in group.glob("*.yaml")) for group in sorted(conf_dir().iterdir())
            if group.is_dir() and not group.name.startswith(("_", ".")) and group.name != "hydra"}

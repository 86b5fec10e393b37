"""Where modelforge finds its Hydra configs, from a source checkout or an installed wheel."""

from __future__ import annotations

import os
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent


def conf_dir() -> Path:
    """The ``conf/`` directory: shipped as ``modelforge/conf`` in a wheel, top-level in a checkout."""
    for candidate in (PACKAGE_DIR / "conf", PACKAGE_DIR.parent / "conf"):
        if (candidate / "train.yaml").is_file():
            return candidate
    raise FileNotFoundError(
        f"modelforge's conf/ directory was not found next to {PACKAGE_DIR}; reinstall the package"
    )


def config_groups() -> dict[str, list[str]]:
    """modelforge's config groups (folders of conf/) and their options.

    ``conf/hydra/`` is left out: it only adds options to Hydra's own groups
    (``hydra/launcher``, ...), which Hydra and its plugins also fill.
    """
    root = conf_dir()
    return {
        group.name: sorted(p.stem for p in group.glob("*.yaml"))
        for group in sorted(root.iterdir())
        if group.is_dir() and not group.name.startswith(("_", ".")) and group.name != "hydra"
    }


def user_cache_dir() -> Path | None:
    """``$XDG_CACHE_HOME`` when it is an absolute path, else ``~/.cache``; None when no home folder is known."""
    cache = os.environ.get("XDG_CACHE_HOME", "")
    # The XDG spec says relative values are invalid and must be ignored.
    if os.path.isabs(cache):
        return Path(cache)
    try:
        return Path.home() / ".cache"
    except RuntimeError:  # no $HOME and no passwd entry (e.g. docker run --user 1234)
        return None

"""A config file of the user's that a shipped one hides.

Hydra searches conf/ before the folders a user adds (``--config-dir``, ``hydra.searchpath``, ``create_model``'s
``config_dir``), so a user's ``model/mlp.yaml`` is never read while ``conf/model/mlp.yaml`` exists: the command
would run with the shipped file and say nothing. Such a file is refused before any work, naming both.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from modelforge.config import conf_dir
from modelforge.errors import ConfigError


def check_not_shadowed(folder: str | Path, files: Iterable[Path] | None = None) -> None:
    """Refuse a YAML file under ``folder`` at the path of a shipped config (``model/mlp.yaml``); ``files``: the
    folder's YAML files, when the caller has listed them already."""
    shipped = conf_dir().resolve()
    root = Path(folder).expanduser().resolve()
    if root == shipped or not root.is_dir():
        return  # conf/ itself; a folder that is not there is Hydra's to report
    for path in sorted(root.rglob("*.y*ml")) if files is None else files:
        relative = path.resolve().relative_to(root)
        if (shipped / relative).is_file():
            group = relative.parent.as_posix()
            choice = f"{group}={relative.stem}" if group != "." else f"the {relative.stem} command's config"
            raise ConfigError(str(path), f"is never read: the shipped {shipped / relative} has its name, and Hydra "
                              f"reads the shipped configs first ({choice} is the shipped one)",
                              hint=f"give yours a name of its own, e.g. {relative.with_stem('my_' + relative.stem)}")

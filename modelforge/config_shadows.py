"""Config files of the user's that a run selects but Hydra never reads, because a shipped file has their name.

Hydra searches conf/ before the folders a user adds (``--config-dir``, ``hydra.searchpath``, ``create_model``'s
``config_dir``; Hydra puts ``--config-dir`` after the app's own folder, and its public API has no way to put it
first), so a user's ``model/mlp.yaml`` is never read while ``conf/model/mlp.yaml`` exists: the command would run
with the shipped file and say nothing. A folder is judged by what a run selects: Hydra's own defaults list of the
run names every config it will read (``model/mlp``, ``blocks/swin`` through a model's defaults); each one that a
user folder also holds is refused, all of them in one error. Files the run does not select are left alone.
Paths are taken as Hydra takes them: links followed (a linked file or ``model/`` folder is the user's file).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence
from pathlib import Path

from modelforge.config import conf_dir
from modelforge.errors import ConfigError


def selected_configs(loader: object, config_name: str, overrides: Sequence[Sequence[str]], multirun: bool) -> set[str]:
    """The config paths (``model/mlp``) Hydra's ``loader`` (a ConfigLoader) reads for each list of ``overrides``;
    a list Hydra cannot compose adds nothing (Hydra reports it when it composes)."""
    from hydra.types import RunMode

    mode = RunMode.MULTIRUN if multirun else RunMode.RUN
    selected: set[str] = set()
    for one in overrides:
        try:
            defaults = loader.compute_defaults_list(config_name, list(one), mode)  # type: ignore[attr-defined]
        except Exception:  # noqa: BLE001 - a run Hydra refuses: its own error comes when it composes
            continue
        selected.update(d.config_path for d in defaults.defaults if d.config_path)
    return selected


def is_regular_file(path: Path) -> bool:
    """Whether ``path`` (links followed) is a regular file: what Hydra's file source reads (``os.path.isfile``)."""
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except OSError:  # missing, a dangling link, a loop of links
        return False


def check_not_shadowed(folders: Sequence[str | Path], selected: set[str]) -> None:
    """Refuse the files of the user's ``folders`` at the path of a shipped config that the run ``selected``
    (config paths, as :func:`selected_configs` gives them), naming every one."""
    shipped = conf_dir()
    found = []
    for folder in folders:
        root = Path(folder).expanduser().absolute()
        if root.resolve() == shipped.resolve():
            continue
        found += [(root / f"{path}.yaml", path) for path in sorted(selected)
                  if is_regular_file(root / f"{path}.yaml") and (shipped / f"{path}.yaml").is_file()]
    if not found:
        return
    files = ", ".join(str(file) for file, _ in found)
    choices = ", ".join(_choice(path) for _, path in found)
    many = len(found) > 1
    theirs = ", ".join(str(shipped / f"{path}.yaml") for _, path in found)
    raise ConfigError(files, f"{'are' if many else 'is'} never read: the shipped {theirs} "
                      f"{'have their names' if many else 'has its name'}, and Hydra reads the shipped configs first "
                      f"({choices} {'are' if many else 'is'} the shipped one{'s' if many else ''})",
                      hint=f"give {'each' if many else 'yours'} a name of its own, e.g. "
                      f"{Path(found[0][1]).with_name('my_' + Path(found[0][1]).name)}.yaml")


def _choice(path: str) -> str:
    group, _, name = path.rpartition("/")
    return f"{group}={name}" if group else f"the {name} command's config"


def user_yaml_files(folder: str | Path) -> list[Path]:
    """The regular ``.yaml`` files under ``folder`` that Hydra could read: linked files and folders followed as
    Hydra follows them, each folder once (a loop of links ends), FIFOs and devices left out (Hydra reads neither)."""
    seen: set[tuple[int, int]] = set()
    found = []
    for top, dirs, names in os.walk(Path(folder).expanduser(), followlinks=True):
        info = os.stat(top)
        if (info.st_dev, info.st_ino) in seen:
            dirs.clear()
            continue
        seen.add((info.st_dev, info.st_ino))
        found += [Path(top, name) for name in sorted(names)
                  if name.endswith(".yaml") and is_regular_file(Path(top, name))]
    return found


def unread_file_error(folders: Sequence[str | Path], config_path: str) -> ConfigError | None:
    """Why Hydra found no config ``config_path`` (``model/mine``) where a user's folder holds something by that
    name: a ``.yml`` file (Hydra reads ``.yaml`` only), or a FIFO, device or folder named ``.yaml``."""
    for folder in folders:
        path = Path(folder).expanduser().absolute() / f"{config_path}.yaml"
        if os.path.lexists(path) and not is_regular_file(path):
            return ConfigError(str(path), "is not a regular file (a FIFO, a device, a folder or a broken link): "
                               "Hydra reads config files only", hint="make it a file of YAML")
        if is_regular_file(yml := path.with_suffix(".yml")):
            return ConfigError(str(yml), "Hydra reads config files named .yaml only, not .yml",
                               hint=f"rename it: {yml.with_suffix('.yaml').name}")
    return None

"""A command's Hydra arguments, parsed by Hydra's own parsers, and the config search path they select.

Used for what Hydra does not do itself: listing a group's options for a did-you-mean
after a failed composition (Hydra has cleared its state by then), and loading a model
given as a YAML file path (``model=path/to/file.yaml``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from hydra._internal.config_loader_impl import ConfigLoaderImpl
from hydra._internal.utils import create_automatic_config_search_path, get_args_parser
from hydra.core.config_search_path import ConfigSearchPath, SearchPathQuery
from hydra.core.config_store import ConfigStore
from hydra.core.object_type import ObjectType
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override
from hydra.errors import HydraException
from omegaconf import DictConfig

from modelforge.config import check_yaml_file, conf_dir, load_yaml_file
from modelforge.errors import ConfigError

MODEL_FILE_SUFFIXES = (".yaml", ".yml")


@dataclass
class CommandLine:
    """What Hydra will read from ``argv``: the primary config, ``--config-dir`` and the overrides."""

    config_name: str
    config_dir: str | None = None
    overrides: list[Override] = field(default_factory=list)

    @classmethod
    def parse(cls, argv: list[str], config_name: str) -> CommandLine:
        args = get_args_parser().parse_args(argv)  # Hydra's parser: a bad flag exits as Hydra would
        try:
            overrides = OverridesParser.create().parse_overrides(args.overrides)
        except HydraException:
            overrides = []  # Hydra reports the bad override when it composes
        return cls(args.config_name or config_name, args.config_dir, overrides)

    def search_path(self) -> ConfigSearchPath:
        """The search path ``hydra.main`` builds: Hydra's own configs, conf/, plugins, ``--config-dir``."""
        search_path = create_automatic_config_search_path(None, None, str(conf_dir()))
        if self.config_dir is not None and os.path.isdir(self.config_dir):
            # As hydra._internal.utils._run_hydra adds it.
            search_path.prepend(provider="command-line", path=f"file://{os.path.abspath(self.config_dir)}",
                                anchor=SearchPathQuery(provider="schema"))
        return search_path

    def group_options(self, group: str) -> list[str]:
        """The options of config group ``group`` in every directory searched, ``hydra.searchpath`` included."""
        searchpath = [o.input_line for o in self.overrides if o.key_or_group == "hydra.searchpath" and o.input_line]
        try:
            loader = ConfigLoaderImpl(config_search_path=self.search_path())
            return sorted(loader.get_group_options(group, ObjectType.CONFIG, self.config_name, searchpath))
        except Exception:  # noqa: BLE001 - a search path Hydra could not read lists nothing
            return []

    def user_config_dirs(self) -> list[Path]:
        """The user's own config folders: ``--config-dir`` and ``file://`` entries of ``hydra.searchpath``."""
        dirs = [self.config_dir] if self.config_dir else []
        for override in self.overrides:
            if override.key_or_group == "hydra.searchpath" and not override.is_sweep_override():
                value = override.value()
                dirs += [str(v) for v in (value if isinstance(value, list) else [value])]
        folders = [Path(d.removeprefix("file://")).expanduser() for d in dirs if "://" not in d or d.startswith("file://")]
        return [f for f in folders if f.is_dir()]

    def check_user_yaml(self) -> None:
        """Bound every YAML file of the user's config folders (alias bombs, parse errors) before Hydra reads them."""
        for folder in self.user_config_dirs():
            for path in sorted(folder.rglob("*.y*ml")):
                check_yaml_file(path)

    def register_model_files(self) -> None:
        """Make ``model=path/to/file.yaml`` load that file, as an option of the model group.

        The file is stored in Hydra's ConfigStore under the path as written, so the
        override and the run's recorded choices stay exactly what the user typed.
        """
        for override in self.overrides:
            if override.key_or_group != "model" or override.is_delete():
                continue
            for value in _values(override):
                if isinstance(value, str) and value.endswith(MODEL_FILE_SUFFIXES):
                    _store_model_file(value)


def _values(override: Override) -> list[object]:
    if not override.is_sweep_override():
        return [override.value()]
    try:
        return list(override.sweep_string_iterator())
    except Exception:  # noqa: BLE001 - glob()/range() sweeps name no files
        return []


def load_model_file(path: Path) -> DictConfig:
    """Read a user's model YAML file."""
    cfg = load_yaml_file(path)  # bounded: an alias bomb or a syntax error is one ConfigError
    if not isinstance(cfg, DictConfig):
        raise ConfigError("model", f"{path} must hold a mapping (name: ..., ...), got a {type(cfg).__name__}")
    return cfg


def _store_model_file(value: str) -> None:
    path = Path(value).expanduser()
    if not path.is_file():
        raise ConfigError("model", f"no model file {value!r} (looked for {path.resolve()})",
                          hint="name a model option (model=cnn) or an existing YAML file (model=configs/my_model.yaml)")
    folder, _, name = value.rpartition("/")
    # Hydra looks the option up as "model/<value>"; ConfigStore skips empty path parts.
    group = "/".join(["model", *(part for part in folder.split("/") if part)])
    ConfigStore.instance().store(name=name, node=load_model_file(path), group=group, package="model",
                                 provider="modelforge model file")

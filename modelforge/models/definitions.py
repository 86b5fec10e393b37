"""Where a composite block is written: the file and line behind an error at ``model.blocks.<name>...``.

Hydra merges a model file and the ``blocks/`` files its defaults list names into one config, and
with that the files are forgotten. An error inside a composite names its config path
(``model.blocks.basic.nodes.add``); :class:`ModelFiles` finds the file that defines the block
again (the model file's own ``blocks:``, else the last ``- /blocks/<file>@blocks`` of its
defaults that defines it), searching the config folders in Hydra's order, and the line of the
deepest key of the path it can find there.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml

_BLOCKS_DEFAULT = re.compile(r"^/?blocks/(?P<file>[\w./-]+)@blocks$")


@dataclass(frozen=True)
class ModelFiles:
    """The model option a config was composed from (``resnet18`` or ``configs/my.yaml``) and the config
    folders, searched in order."""

    model: str
    folders: tuple[Path, ...]

    def _config(self, group: str, option: str) -> Path | None:
        if option.endswith((".yaml", ".yml")) and group == "model":
            return Path(option).expanduser().resolve()
        return next((path for folder in self.folders if (path := folder / group / f"{option}.yaml").is_file()), None)

    def locate(self, error_path: str, model_path: str = "model") -> str | None:
        """``FILE:LINE`` of the composite an error path lies in, or None (not in a composite, or not found)."""
        prefix = f"{model_path}.blocks."
        if not error_path.startswith(prefix):
            return None
        name, *rest = [re.sub(r"\[.*?\]", "", key) for key in error_path[len(prefix):].split(".")]
        model_file = self._config("model", self.model)
        if model_file is None or not model_file.is_file():
            return None
        root = _compose(model_file)
        if (line := _line(root, ["blocks", name, *rest], required=2)) is not None:
            return f"{model_file}:{line}"
        defaults = _value(root, "defaults")
        entries = [n.value for n in defaults.value] if isinstance(defaults, yaml.SequenceNode) else []
        for entry in reversed(entries):  # later defaults override earlier ones
            match = _BLOCKS_DEFAULT.match(str(entry))
            blocks_file = self._config("blocks", match["file"]) if match else None
            if blocks_file is not None and (line := _line(_compose(blocks_file), [name, *rest])) is not None:
                return f"{blocks_file}:{line}"
        return None


def _compose(path: Path) -> yaml.Node | None:
    try:
        return yaml.compose(path.read_text(), Loader=yaml.SafeLoader)
    except (OSError, yaml.YAMLError):
        return None


def _entry(node: yaml.Node | None, key: str) -> tuple[yaml.Node, yaml.Node] | None:
    """The key and value nodes of ``key`` in a mapping node."""
    if not isinstance(node, yaml.MappingNode):
        return None
    return next(((k, v) for k, v in node.value if isinstance(k, yaml.ScalarNode) and k.value == key), None)


def _value(node: yaml.Node | None, key: str) -> yaml.Node | None:
    entry = _entry(node, key)
    return entry[1] if entry else None


def _line(root: yaml.Node | None, keys: Sequence[str], required: int = 1) -> int | None:
    """The 1-based line of the deepest of ``keys`` found under ``root`` (None unless the first ``required`` are)."""
    node, line = root, None
    for depth, key in enumerate(keys):
        entry = _entry(node, key)
        if entry is None:
            return line if depth >= required else None
        line, node = entry[0].start_mark.line + 1, entry[1]
    return line


def missing_defaults_hint(model: str | None, folders: Sequence[Path]) -> str | None:
    """The line a model file lacks when it has no ``/model_defaults/<name>@_here_`` in its defaults list (the
    entry that gives it the keys in_channels, input_size, n_classes, ...); None when it has it or is not found."""
    path = ModelFiles(model, tuple(folders))._config("model", model) if model else None
    root = _compose(path) if path is not None and path.is_file() else None
    if root is None:
        return None
    defaults = _value(root, "defaults")
    entries = [str(n.value) for n in defaults.value] if isinstance(defaults, yaml.SequenceNode) else []
    if any(e.lstrip("/").startswith("model_defaults/") for e in entries):
        return None
    name = _value(root, "name")
    entry = f"/model_defaults/{name.value if isinstance(name, yaml.ScalarNode) else 'graph'}@_here_"
    return (f"{path} has no `- {entry}` in its defaults list, the line that gives a model file its keys "
            f"(in_channels, input_size, n_classes, ...): start the file with `defaults: [{entry}, _self_]`")


def defaults_cycle(folders: Sequence[Path]) -> tuple[Path, list[str]] | None:
    """A config file of ``folders`` whose defaults list includes itself, directly or through other files (Hydra
    recurses until Python gives up): the file and the cycle (``blocks/loop -> blocks/loop``); None if none does."""
    files: dict[str, Path] = {}
    for folder in reversed(list(folders)):  # the first folder wins, as in Hydra's search path
        for path in Path(folder).glob("*/**/*.yaml"):
            files[path.relative_to(folder).with_suffix("").as_posix()] = path
    state: dict[str, str] = {}

    def visit(config: str, trail: list[str]) -> list[str] | None:
        if state.get(config) == "visiting":
            return [*trail[trail.index(config):], config]
        if state.get(config) == "done" or config not in files:
            return None
        state[config] = "visiting"
        for entry in _default_entries(_compose(files[config]), config.rpartition("/")[0]):
            if (cycle := visit(entry, [*trail, config])) is not None:
                return cycle
        state[config] = "done"
        return None

    for config in files:
        if (cycle := visit(config, [])) is not None:
            return files[cycle[0]], cycle
    return None


def _default_entries(root: yaml.Node | None, group: str) -> list[str]:
    """The configs a defaults list names (``group/option``), relative entries resolved against ``group``."""
    defaults = _value(root, "defaults")
    named = []
    for node in defaults.value if isinstance(defaults, yaml.SequenceNode) else []:
        if isinstance(node, yaml.ScalarNode):
            named.append(node.value)
        elif isinstance(node, yaml.MappingNode) and len(node.value) == 1:
            key, value = node.value[0]
            words = str(key.value).split()
            if isinstance(value, yaml.ScalarNode) and value.value not in (None, "null", "") and words:
                named.append(f"{words[-1]}/{value.value}")
    out = []
    for entry in named:
        entry = entry.partition("@")[0]
        if entry == "_self_" or not entry:
            continue
        out.append(entry[1:] if entry.startswith("/") else f"{group}/{entry}" if group else entry)
    return out

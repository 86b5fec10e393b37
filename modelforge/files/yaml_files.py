"""Config files read safely: a YAML file that does not parse is one error naming ``file:line:column``, a tag
that would build a Python object is refused, and aliases are bounded (an alias bomb fails in milliseconds).
"""

from __future__ import annotations

from pathlib import Path

from typing import TYPE_CHECKING

import yaml

from modelforge.errors import ConfigError

if TYPE_CHECKING:
    from omegaconf import DictConfig, ListConfig

# A hand-written config uses a few aliases and at most some thousands of nodes.
MAX_ALIAS_USES = 100
MAX_EXPANDED_NODES = 100_000


def _parse_error(path: Path, error: yaml.YAMLError) -> ConfigError:
    """``file:line:column: invalid YAML: ...`` (the line and column where PyYAML knows them)."""
    mark = getattr(error, "problem_mark", None) or getattr(error, "context_mark", None)
    where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark is not None else str(path)
    problem = getattr(error, "problem", None) or str(error).splitlines()[0]
    context = getattr(error, "context", None)
    # The safe loader has no constructor for !!python/object and its kin: a config file never builds objects.
    builds = "tag:yaml.org,2002:python/" in problem
    hint = "a config holds plain values; tags that build Python objects are refused" if builds else None
    return ConfigError(where, f"invalid YAML: {f'{context}, {problem}' if context else problem}", hint=hint)


def yaml_file_error(error: yaml.YAMLError) -> ConfigError:
    """:func:`_parse_error` of a YAML error raised while another reader (Hydra) read a config file."""
    mark = getattr(error, "problem_mark", None) or getattr(error, "context_mark", None)
    return _parse_error(Path(mark.name) if mark is not None else Path("a config file"), error)


def _expanded_size(root: yaml.Node, path: Path) -> int:
    """Nodes after alias expansion, counting each distinct node once (memoized)."""
    sizes: dict[int, int] = {}
    in_progress: set[int] = set()
    alias_uses = 0

    def size(node: yaml.Node) -> int:
        nonlocal alias_uses
        if id(node) in sizes:  # a node reached again is an alias use
            alias_uses += 1
            if alias_uses > MAX_ALIAS_USES:
                raise ConfigError(str(path), f"more than {MAX_ALIAS_USES} YAML alias uses",
                                  hint="write the values out; aliases are meant for a few repeats")
            return sizes[id(node)]
        if id(node) in in_progress:
            raise ConfigError(str(path), "a YAML alias refers to a node that contains it (a cycle)")
        in_progress.add(id(node))
        children = ([c for pair in node.value for c in pair] if isinstance(node, yaml.MappingNode)
                    else node.value if isinstance(node, yaml.SequenceNode) else [])
        sizes[id(node)] = total = 1 + sum(size(child) for child in children)
        in_progress.discard(id(node))
        if total > MAX_EXPANDED_NODES:
            raise ConfigError(str(path), f"YAML aliases expand to more than {MAX_EXPANDED_NODES:,} nodes",
                              hint="a config that large is an alias bomb or a mistake; write the values out")
        return total

    return size(root)


def check_yaml_file(path: str | Path) -> None:
    """Refuse a YAML file that does not parse or whose aliases expand past the bounds.

    Raises:
        ConfigError: naming the file (and ``file:line:column`` for a syntax error).
    """
    root = _composed(Path(path))
    if root is not None:
        _expanded_size(root, Path(path))


def bound_yaml_file(path: str | Path) -> None:
    """:func:`check_yaml_file`'s bounds on a file of a user's config folder, which a run may never read: a file
    that does not parse is left to Hydra, whose error names it where a run reads it (a CI file is no config)."""
    try:
        root = _composed(Path(path))
    except ConfigError as exc:
        if isinstance(exc.__context__, (yaml.YAMLError, UnicodeDecodeError)):
            return
        raise
    if root is not None:
        _expanded_size(root, Path(path))


MAX_YAML_BYTES = 16 * 2**20  # a hand-written config is some kilobytes


def _composed(path: Path) -> yaml.Node | None:
    """The YAML node tree of a config file (aliases not expanded), read only when it is a file of a config's size."""
    if not path.exists():
        raise ConfigError(str(path), "config file not found")
    if not path.is_file():  # a FIFO or a device would block or never end; Hydra too reads regular files only
        raise ConfigError(str(path), "is not a regular file (a FIFO, a device, a folder): a config is read from a file")
    if (size := path.stat().st_size) > MAX_YAML_BYTES:
        raise ConfigError(str(path), f"is {size:,} bytes: a config file is at most {MAX_YAML_BYTES:,}",
                          hint="a config that large is a mistake or a data file; keep data out of the config folder")
    try:
        return yaml.compose(path.read_text(encoding="utf-8"), Loader=yaml.SafeLoader)
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(str(path), f"cannot read the file: {exc}") from None
    except yaml.YAMLError as exc:
        raise _parse_error(path, exc) from None


def load_yaml_file(path: str | Path) -> DictConfig | ListConfig:
    """:func:`check_yaml_file`, then ``OmegaConf.load``; any YAML error becomes a ConfigError."""
    from omegaconf import OmegaConf  # here: `list` imports this module and reads no config with OmegaConf

    check_yaml_file(path)
    try:
        return OmegaConf.load(Path(path))
    except yaml.YAMLError as exc:  # e.g. a duplicate key, found only while constructing
        raise _parse_error(Path(path), exc) from None
    except OSError as exc:  # OmegaConf's word for a file that holds a bare scalar
        raise ConfigError(str(path), f"must hold a mapping or a list: {exc}") from None

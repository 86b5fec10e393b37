"""Reading a user's YAML file with bounded work: no alias bombs, parse errors with a place.

YAML aliases (``*a``) repeat an anchored node; nested ones grow exponentially
(nine levels of nine make 9**9 nodes from 300 bytes), and OmegaConf expands
every one of them. ``yaml.compose`` builds the node graph *without* expanding
aliases, so the expanded size is counted on that graph, with memoization,
before OmegaConf ever sees the file.
"""

from __future__ import annotations

from pathlib import Path

import yaml
from omegaconf import DictConfig, ListConfig, OmegaConf

from modelforge.errors import ConfigError

# A hand-written config uses a few aliases and at most some thousands of nodes.
MAX_ALIAS_USES = 100
MAX_EXPANDED_NODES = 100_000


def _where(path: Path, error: yaml.YAMLError) -> str:
    mark = getattr(error, "problem_mark", None) or getattr(error, "context_mark", None)
    return f"{path}:{mark.line + 1}:{mark.column + 1}" if mark is not None else str(path)


def _parse_error(path: Path, error: yaml.YAMLError) -> ConfigError:
    problem = getattr(error, "problem", None) or str(error).splitlines()[0]
    context = getattr(error, "context", None)
    text = f"{context}, {problem}" if context else problem
    return ConfigError(_where(path, error), f"invalid YAML: {text}")


def _expanded_size(root: yaml.Node, path: Path) -> int:
    """Nodes after alias expansion, counting each distinct node once (memoized)."""
    sizes: dict[int, int] = {}
    in_progress: set[int] = set()
    alias_uses = 0

    def size(node: yaml.Node) -> int:
        nonlocal alias_uses
        key = id(node)
        if key in sizes:  # a node reached again is an alias use
            alias_uses += 1
            if alias_uses > MAX_ALIAS_USES:
                raise ConfigError(str(path), f"more than {MAX_ALIAS_USES} YAML alias uses",
                                  hint="write the values out; aliases are meant for a few repeats")
            return sizes[key]
        if key in in_progress:
            raise ConfigError(str(path), "a YAML alias refers to a node that contains it (a cycle)")
        in_progress.add(key)
        total = 1
        if isinstance(node, yaml.SequenceNode):
            total += sum(size(child) for child in node.value)
        elif isinstance(node, yaml.MappingNode):
            total += sum(size(k) + size(v) for k, v in node.value)
        in_progress.discard(key)
        sizes[key] = total
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
    path = Path(path)
    if not path.is_file():
        raise ConfigError(str(path), "config file not found")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(str(path), f"cannot read the file: {exc}") from None
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        raise _parse_error(path, exc) from None
    if root is not None:
        _expanded_size(root, path)


def load_yaml_file(path: str | Path) -> DictConfig | ListConfig:
    """:func:`check_yaml_file`, then ``OmegaConf.load``; any YAML error becomes a ConfigError."""
    check_yaml_file(path)
    try:
        return OmegaConf.load(Path(path))
    except yaml.YAMLError as exc:  # e.g. a duplicate key, found only while constructing
        raise _parse_error(Path(path), exc) from None

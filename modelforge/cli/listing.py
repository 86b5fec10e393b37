"""``python -m modelforge list``: every registry's names, the composite blocks and the model files.

It imports what the names need (torch, the modules that register them) and neither Hydra nor OmegaConf: the
built-ins' names are loaded without their defaults in Hydra's ConfigStore, and the YAML files are read as OmegaConf
reads them without importing it (see ``_read_yaml``).
"""

from __future__ import annotations

import argparse
import fnmatch
import functools
import gc
import re
import sys
import textwrap
from pathlib import Path
from typing import Any

import yaml

from modelforge.conf_folder import conf_dir
from modelforge.errors import UnknownNameError
from modelforge.files.yaml_files import MAX_YAML_BYTES
from modelforge.registry import REGISTRIES, load_builtins


def list_names(argv: list[str]) -> int:
    """``list [REGISTRY] [GLOB] [--config-dir DIR]``; ``blocks`` adds the composite blocks of conf/ and DIR."""
    parser = argparse.ArgumentParser(prog="python -m modelforge list", description="List registries and their names.")
    parser.add_argument("registry", nargs="?", help=f"one of: {', '.join(REGISTRIES)}")
    parser.add_argument("pattern", nargs="?", default="*", help="glob over names, e.g. 'conv*'")
    parser.add_argument("--config-dir", type=Path, help="a folder of your configs: its blocks/ are listed too")
    args = parser.parse_args(argv)
    # The names and their descriptions. A process without Hydra (`python -m modelforge list`) composes nothing
    # after listing: the built-ins' defaults wait for the next load_builtins(), and Hydra and OmegaConf stay out. One
    # that has Hydra (a test, a notebook) may compose next, from Hydra's own API: the defaults are stored as ever.
    alone = "hydra" not in sys.modules
    load_builtins(defaults=not alone)
    if alone:  # what was imported is never garbage: a collection while listing would walk torch's objects again
        gc.freeze()
    if args.registry is not None and args.registry not in REGISTRIES:
        raise UnknownNameError("registry", args.registry, REGISTRIES, path="list")
    lines = []
    for registry in [REGISTRIES[args.registry]] if args.registry else REGISTRIES.values():
        shipped = _shipped_options({"callbacks": "callbacks", "loggers": "logger"}.get(registry.name), args.pattern)
        rows = _table(shipped + [(name, registry.describe(name)) for name in registry.names(args.pattern)])
        lines += [f"{registry.name}: {registry.description}", *(rows or [f"  (no names match {args.pattern!r})"])]
        if registry.name == "blocks" and (composites := _composites([args.config_dir, conf_dir()], args.pattern)):
            lines += ["  composite blocks (a model file's defaults: - /blocks/<file>@blocks):", *_table(composites)]
        if registry.name == "models" and (files := _model_files([args.config_dir, conf_dir()], args.pattern)):
            lines += ["  model files (model=NAME; each builds one of the models above):", *_table(files)]
        lines.append("")
    print("\n".join(lines).rstrip())
    return 0


def _shipped_options(group: str | None, pattern: str) -> list[tuple[str, str]]:
    """The options of conf/callbacks or conf/logger, with the class each instantiates."""
    files = sorted((conf_dir() / group).glob("*.yaml")) if group else []
    return [(f.stem, f"conf/{group}/{f.name}: {yaml.safe_load(f.read_text())['_target_']}")
            for f in files if fnmatch.fnmatch(f.stem, pattern)]


def _table(rows: list[tuple[str, str]], columns: int = 100, name_column: int = 24) -> list[str]:
    """Rows of ``name  about`` in ``columns``: the text wrapped under itself, and a name wider than the name
    column (a composite with its parameters) on a line of its own, its text on the next."""
    width = min(max((len(name) for name, _ in rows), default=0), name_column)
    indent = " " * (width + 4)
    # a path stays whole, even past the columns
    wrap = functools.partial(textwrap.wrap, width=columns, break_on_hyphens=False, break_long_words=False)
    lines = []
    for name, about in rows:
        if len(name) > width:
            lines += [*wrap(name, initial_indent="  ", subsequent_indent="    "),
                      *wrap(about, initial_indent=indent, subsequent_indent=indent)]
        else:
            lines += wrap(f"{name.ljust(width)}  {about}", initial_indent="  ",
                          subsequent_indent=indent) or [f"  {name}"]
    return lines


def _model_files(folders: list[Path | None], pattern: str) -> list[tuple[str, str]]:
    """The options of the model group (conf/model and DIR/model), each with the first sentence of its comment."""
    found: dict[str, tuple[str, str]] = {}
    for folder in (f for f in folders if f):
        for path in sorted((folder / "model").glob("*.yaml")):
            if fnmatch.fnmatchcase(path.stem, pattern) and path.stem not in found:  # the user's folder first
                where = "conf/model" if folder == conf_dir() else str(folder / "model")
                found[path.stem] = (path.stem, f"{_first_sentence(path)} [{where}/{path.name}]")
    return sorted(found.values())


def _first_sentence(path: Path, limit: int = 100) -> str:
    """The first sentence of the comment a YAML file opens with: up to the first ': ' or '. ' outside parentheses
    ("(Liu et al. 2022)" is inside), cut at a word to ``limit`` characters."""
    comment = []
    for line in path.read_text().splitlines():
        if not line.startswith("#"):
            break
        comment.append(line.lstrip("#").strip())
    text, depth = " ".join(comment), 0
    for i, char in enumerate(text):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if depth == 0 and char in ":." and text[i + 1:i + 2] in (" ", ""):
            text = text[:i]
            break
    return text if len(text) <= limit else text[:limit].rsplit(" ", 1)[0] + " ..."


def _composites(folders: list[Path | None], pattern: str) -> list[tuple[str, str]]:  # of blocks/*.yaml
    found = []
    for path in (p for folder in folders if folder for p in sorted((folder / "blocks").glob("*.yaml"))):
        for name, spec in (_read_yaml(path) or {}).items():
            if isinstance(spec, dict) and fnmatch.fnmatchcase(name, pattern):
                params = ", ".join(k if v == "???" else f"{k}={v}" for k, v in (spec.get("params") or {}).items())
                found.append((f"{name}({params})", f"{spec.get('description', '')} [blocks/{path.name}]"))
    return found


class _OmegaConfLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # libyaml's parser where PyYAML has it
    """A safe loader resolving scalars as OmegaConf's loader does (``omegaconf._utils.get_yaml_loader``):
    ``1e-6`` is a float (YAML 1.1 wants a dot), a date stays a string, and a duplicate key is an error."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        keys = [key.value for key, _ in node.value if key.tag == yaml.resolver.BaseResolver.DEFAULT_SCALAR_TAG]
        if len(keys) != len(set(keys)):
            raise yaml.constructor.ConstructorError("while constructing a mapping", node.start_mark, "duplicate key")
        return super().construct_mapping(node, deep=deep)


_OmegaConfLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag not in ("tag:yaml.org,2002:float",
                                                                       "tag:yaml.org,2002:timestamp")]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()}
_OmegaConfLoader.add_implicit_resolver("tag:yaml.org,2002:float", re.compile(r"""^(?:
     [-+]?[0-9]+(?:_[0-9]+)*\.[0-9_]*(?:[eE][-+]?[0-9]+)?
    |[-+]?[0-9]+(?:_[0-9]+)*(?:[eE][-+]?[0-9]+)
    |\.[0-9]+(?:_[0-9]+)*(?:[eE][-+][0-9]+)?
    |[-+]?[0-9]+(?:_[0-9]+)*(?::[0-5]?[0-9])+\.[0-9_]*
    |[-+]?\.(?:inf|Inf|INF)
    |\.(?:nan|NaN|NAN))$""", re.X), list("-+0123456789."))


def _read_yaml(path: Path) -> Any:
    """The plain values of a YAML file, as ``to_plain(load_yaml_file(path))`` gives them, in a fraction of its time
    and without OmegaConf. A file that is not a plain one of a config's size, holds an anchor (aliases are bounded
    by the full reader), an interpolation (``${...}``) or anything this loader refuses is read by the full reader,
    for its values or its error."""
    try:
        text = path.read_text(encoding="utf-8") if path.is_file() and path.stat().st_size <= MAX_YAML_BYTES else None
    except (OSError, UnicodeDecodeError):
        text = None
    if text is not None and "${" not in text and not re.search(r"&\S", text):  # no interpolation, no anchor
        try:
            return yaml.load(text, Loader=_OmegaConfLoader)  # noqa: S506 - a safe loader
        except yaml.YAMLError:
            pass
    from modelforge.config import to_plain
    from modelforge.files.yaml_files import load_yaml_file

    return to_plain(load_yaml_file(path))

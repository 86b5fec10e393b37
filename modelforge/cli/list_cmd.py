"""``python -m modelforge list [REGISTRY] [GLOB]``: what names each registry holds.

``list blocks`` also shows the composite blocks of the ``blocks`` config group: the shipped
``conf/blocks/*.yaml`` and those of ``--config-dir DIR`` (``DIR/blocks/*.yaml``).
"""

from __future__ import annotations

import argparse
import fnmatch
from pathlib import Path

import modelforge  # noqa: F401 - registers the built-in names
from modelforge.errors import UnknownNameError
from modelforge.registry import REGISTRIES


def composite_blocks(config_dirs: list[Path]) -> list[tuple[str, str, str]]:
    """(name with parameters, description, file) of each composite in the ``blocks/`` folders."""
    from modelforge.config import load_yaml_file, to_plain

    found = []
    for folder in config_dirs:
        for path in sorted((folder / "blocks").glob("*.yaml")):
            for name, spec in (to_plain(load_yaml_file(path)) or {}).items():
                if not isinstance(spec, dict):
                    continue
                params = ", ".join(k if v == "???" else f"{k}={v}" for k, v in (spec.get("params") or {}).items())
                found.append((f"{name}({params})", str(spec.get("description", "")), f"blocks/{path.name}"))
    return found


def format_listing(registry_name: str | None = None, pattern: str = "*", config_dirs: list[Path] = ()) -> str:
    """Registries and their names with one-line descriptions, optionally one registry, glob-filtered."""
    if registry_name is not None and registry_name not in REGISTRIES:
        raise UnknownNameError("registry", registry_name, REGISTRIES, path="list")
    chosen = [REGISTRIES[registry_name]] if registry_name else list(REGISTRIES.values())
    lines = []
    for registry in chosen:
        names = registry.names(pattern)
        lines.append(f"{registry.name}: {registry.description}")
        width = max((len(n) for n in names), default=0)
        lines.extend(f"  {name.ljust(width)}  {registry.describe(name)}" for name in names)
        if not names:
            lines.append(f"  (no names match {pattern!r})")
        if registry.name == "blocks":
            composites = [c for c in composite_blocks(list(config_dirs)) if fnmatch.fnmatchcase(c[0].split("(")[0], pattern)]
            if composites:
                lines.append("  composite blocks (a model file's defaults: - /blocks/<file>@blocks):")
                width = max(len(c[0]) for c in composites)
                lines.extend(f"  {sig.ljust(width)}  {about} [{where}]" for sig, about, where in composites)
        lines.append("")
    return "\n".join(lines).rstrip()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m modelforge list",
        description="List the registries and the names they hold.",
    )
    parser.add_argument("registry", nargs="?", help=f"one of: {', '.join(REGISTRIES)}")
    parser.add_argument("pattern", nargs="?", default="*", help="glob over names, e.g. 'conv*'")
    parser.add_argument("--config-dir", type=Path, help="a folder of your configs: its blocks/ are listed too")
    args = parser.parse_args(argv)
    from modelforge.config import conf_dir

    dirs = [*([args.config_dir] if args.config_dir else []), conf_dir()]
    print(format_listing(args.registry, args.pattern, dirs))
    return 0

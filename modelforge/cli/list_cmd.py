"""``python -m modelforge list [REGISTRY] [GLOB]``: what names each registry holds."""

from __future__ import annotations

import argparse

import modelforge  # noqa: F401 - registers the built-in names
from modelforge.errors import UnknownNameError
from modelforge.registry import REGISTRIES


def format_listing(registry_name: str | None = None, pattern: str = "*") -> str:
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
        lines.append("")
    return "\n".join(lines).rstrip()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m modelforge list",
        description="List the registries and the names they hold.",
    )
    parser.add_argument("registry", nargs="?", help=f"one of: {', '.join(REGISTRIES)}")
    parser.add_argument("pattern", nargs="?", default="*", help="glob over names, e.g. 'conv*'")
    args = parser.parse_args(argv)
    print(format_listing(args.registry, args.pattern))
    return 0

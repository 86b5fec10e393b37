"""The composites of conf/blocks/ files, as a graph's ``blocks`` table (tests build one node of them)."""

from __future__ import annotations

from typing import Any

from modelforge.config import conf_dir, load_yaml_file, to_plain


def shipped_blocks(*files: str) -> dict[str, Any]:
    blocks: dict[str, Any] = {}
    for name in files:
        blocks.update(to_plain(load_yaml_file(conf_dir() / "blocks" / f"{name}.yaml")))
    return blocks

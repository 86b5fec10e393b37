"""User YAML read by the CLI (--config-dir folders, model=FILE.yaml) is bounded before Hydra loads it."""

from __future__ import annotations

from pathlib import Path

import pytest


def _bomb(levels: int = 9) -> str:
    lines = ["a: &a [" + ", ".join(['"lol"'] * 9) + "]"]
    names = "abcdefghijk"
    for prev, name in zip(names, names[1 : levels]):
        lines.append(f"{name}: &{name} [" + ", ".join([f"*{prev}"] * 9) + "]")
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("where", ["config_dir", "searchpath", "model_file"])
def test_alias_bomb_in_user_yaml_is_one_error(run_main, tmp_path: Path, where: str) -> None:
    (tmp_path / "cfg" / "model").mkdir(parents=True)
    bomb = tmp_path / "cfg" / "model" / "bomb.yaml"
    bomb.write_text(_bomb())
    args = {
        "config_dir": ["summary", "--config-dir", str(tmp_path / "cfg"), "model=cnn"],
        "searchpath": ["summary", f"hydra.searchpath=[file://{tmp_path / 'cfg'}]", "model=cnn"],
        "model_file": ["summary", f"model={bomb}"],
    }[where]
    result = run_main(*args)
    assert result.returncode == 2
    assert "bomb.yaml: YAML aliases expand to more than 100,000 nodes" in result.stderr
    assert "Traceback" not in result.stderr


def test_syntax_error_in_a_config_dir_names_file_line_and_column(run_main, tmp_path: Path) -> None:
    (tmp_path / "cfg" / "model").mkdir(parents=True)
    (tmp_path / "cfg" / "model" / "broken.yaml").write_text("name: cnn\nenc_sizes: [32, 64\n")
    result = run_main("summary", "--config-dir", str(tmp_path / "cfg"), "model=cnn")
    assert result.returncode == 2
    assert "broken.yaml:3:1: invalid YAML: while parsing a flow sequence" in result.stderr, result.stderr

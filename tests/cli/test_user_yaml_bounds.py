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
    result = run_main("summary", "--config-dir", str(tmp_path / "cfg"), "model=broken")
    assert result.returncode == 2
    assert "broken.yaml:3:1: invalid YAML: while parsing a flow sequence" in result.stderr, result.stderr
    assert run_main("summary", "--config-dir", str(tmp_path / "cfg"), "model=cnn").returncode == 0  # not read


HUGE_REPEAT = """\
name: graph
nodes:
  x:    {block: conv, args: {out_channels: 8}, repeat: 1000000000}
  flat: {block: flatten}
  head: {block: nn.Linear, args: {out_features: n_classes}}
"""


@pytest.mark.parametrize("command", ["summary", "train"])
def test_a_model_file_with_a_huge_repeat_is_one_error_before_any_work(run_main, tmp_path: Path, command: str) -> None:
    model = tmp_path / "huge.yaml"
    model.write_text(HUGE_REPEAT)
    data = ["data.data_dir=/nonexistent"] if command == "train" else []
    result = run_main(command, f"model={model}", f"hydra.run.dir={tmp_path / 'run'}", *data)
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        "error: model.nodes.x.repeat: 1,000,000,000 copies is more than model.max_repeat (1,000)",
        "  hint: set model.max_repeat=1000000000 if the model really has that many"], result.stderr
    assert command == "summary" or not (tmp_path / "run").exists()  # train: refused before the run directory
    # a file without the shipped defaults has no max_repeat key yet: + adds it (Hydra's hint says so)
    allowed = run_main("summary", f"model={model}", "+model.max_repeat=2", "model.nodes.x.repeat=2")
    assert allowed.returncode == 0, allowed.stderr

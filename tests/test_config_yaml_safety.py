"""A user's YAML file is read with bounded work, and its errors name file, line and column."""

from __future__ import annotations

from pathlib import Path

import pytest

from modelforge import ConfigError, build_model
from modelforge.config import check_yaml_file, load_yaml_file


def _alias_bomb(levels: int = 9, width: int = 9) -> str:
    lines = ["a: &a [" + ", ".join(['"lol"'] * width) + "]"]
    names = "abcdefghijklmnopqrstuvwxyz"
    for prev, name in zip(names, names[1 : levels]):
        lines.append(f"{name}: &{name} [" + ", ".join([f"*{prev}"] * width) + "]")
    return "\n".join(lines) + "\n"


def test_alias_bomb_is_refused_before_expansion(tmp_path: Path) -> None:
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(_alias_bomb())  # 9**9 (387 million) strings once expanded, from ~400 bytes
    assert len(bomb.read_bytes()) < 500
    with pytest.raises(ConfigError, match=r"bomb.yaml: YAML aliases expand to more than 100,000 nodes"):
        build_model(bomb)
    with pytest.raises(ConfigError, match="expand to more than"):
        check_yaml_file(bomb)


def test_many_alias_uses_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "many.yaml"
    path.write_text("a: &a 1\nb: [" + ", ".join(["*a"] * 150) + "]\n")
    with pytest.raises(ConfigError, match=r"many.yaml: more than 100 YAML alias uses"):
        load_yaml_file(path)


def test_recursive_alias_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "loop.yaml"
    path.write_text("a: &a [1, *a]\n")
    with pytest.raises(ConfigError, match=r"loop.yaml: a YAML alias refers to a node that contains it"):
        build_model(path)


def test_a_few_aliases_still_load(tmp_path: Path) -> None:
    path = tmp_path / "model.yaml"
    path.write_text("name: cnn\nenc_sizes: &enc [8, 16]\ndec_sizes: *enc\n"
                    "init: &init {conv: kaiming_normal}\nactivation: &act relu\ndec_activation: *act\n")
    model = build_model(path)
    assert [b.conv.out_channels for b in model.encoder] == [8, 16]
    assert [b.linear.out_features for b in model.decoder] == [8, 16]


def test_syntax_error_names_file_line_and_column(tmp_path: Path) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text("name: cnn\nenc_sizes: [8, 16]\n  dropout: 0.1\n")
    with pytest.raises(ConfigError, match=r"broken.yaml:3:3: invalid YAML: while parsing a block mapping, expected <block end>"):
        build_model(path)


def test_duplicate_key_names_its_line(tmp_path: Path) -> None:
    path = tmp_path / "dup.yaml"
    path.write_text("name: cnn\ndropout: 0.1\ndropout: 0.2\n")
    with pytest.raises(ConfigError, match=r"dup.yaml:3:1: invalid YAML: .*duplicate key"):
        build_model(path)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"nope.yaml: config file not found"):
        build_model(tmp_path / "nope.yaml")

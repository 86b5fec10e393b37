"""The module-graph picture: units traced with forward hooks, skips as edges, written as SVG/PNG."""

from __future__ import annotations

from pathlib import Path

import pytest
from torch import nn

from modelforge import build_model
from modelforge.config import conf_dir
from modelforge.errors import ConfigError
from modelforge.inspect.model_graph import draw_model_graph, trace_units


def edges(units) -> dict[str, list[str]]:
    names = {i: u.name for i, u in enumerate(units)} | {-1: "input"}
    return {u.name: [names[i] for i in u.inputs] for u in units}


def test_a_graph_models_skips_are_edges() -> None:
    model = build_model(conf_dir() / "model" / "graph.yaml", seed=0)
    units = trace_units(model, model.input_shape)
    graph = edges(units)
    assert graph["nodes.stem"] == ["input"]
    assert graph["nodes.skip1"] == ["nodes.stem", "nodes.res1b"]  # the residual
    assert graph["nodes.skip2"] == ["nodes.down1", "nodes.res2b"]
    assert [u.kind for u in units][:4] == ["ConvBlock", "ConvBlock", "ConvBlock", "Add"]  # blocks are one unit
    assert units[-1].name == "nodes.head" and units[-1].shape == "[1, 10]"


def test_a_plain_module_is_a_chain_of_its_leaves() -> None:
    model = nn.Sequential(nn.Flatten(), nn.Linear(4, 3), nn.ReLU())
    assert edges(trace_units(model, (2, 2))) == {"0": ["input"], "1": ["0"], "2": ["1"]}
    assert model.training  # mode restored


def test_pictures_are_written_and_a_bad_suffix_is_refused(tmp_path: Path) -> None:
    model = build_model({"name": "cnn", "enc_sizes": [8]})
    svg = draw_model_graph(model, model.input_shape, tmp_path / "sub" / "m.svg", title="cnn")
    assert svg.read_text().lstrip().startswith("<?xml") and "encoder.0" in svg.read_text()
    png = draw_model_graph(model, model.input_shape, tmp_path / "m.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.png", "sub"]  # no temporary files left
    with pytest.raises(ConfigError, match=r"^summary\.graph: '.*m\.txt' has no picture suffix\n  allowed: svg, png, pdf"):
        draw_model_graph(model, model.input_shape, tmp_path / "m.txt")


def test_summary_command_draws_the_graph(run_main, tmp_path: Path) -> None:
    out = tmp_path / "graph.svg"
    result = run_main("summary", "model=graph", "summary.graph=graph.svg", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert f"module graph written to {out}\n" in result.stdout and "nodes.skip1" in out.read_text()  # printed whole
    bad = run_main("summary", "model=graph", f"summary.graph={tmp_path / 'graph.txt'}")
    assert bad.returncode == 2 and "summary.graph: " in bad.stderr
    assert "Total params" not in bad.stdout and "Traceback" not in bad.stderr  # refused before any work

"""`python -m modelforge summary ...` as a user runs it (real Hydra composition, in process)."""

from __future__ import annotations

import re

from tests.conftest import SHIPPED_MODELS


def test_summary_cnn_prints_tree_shapes_and_total(run_main) -> None:
    result = run_main("summary", "model=cnn", "enc_sizes=[32,64]")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert re.search(r"encoder\.0\s+ConvBlock\s+\[2, 32, 14, 14\]\s+384\s+65", out)
    assert "Total params: 421,834" in out.splitlines()[-1]


def test_summary_seed_cnn_total(run_main) -> None:
    result = run_main("summary", "model=seed_cnn")
    assert result.returncode == 0, result.stderr
    assert "Total params: 51,410,506" in result.stdout


def test_shortcut_changes_the_model(run_main) -> None:
    result = run_main("summary", "model=cnn", "enc_sizes=[8]", "dec_sizes=[]", "activation=gelu")
    assert result.returncode == 0, result.stderr
    assert "1 -> 8, kernel=3" in result.stdout and "act=gelu" in result.stdout
    assert re.search(r"head\s+Linear\s+\[2, 10\]\s+15,690", result.stdout)  # 8*14*14*10 + 10


def test_unknown_activation_suggests_and_prints_no_traceback(run_main) -> None:
    result = run_main("summary", "model=cnn", "enc_sizes=[32,64]", "activation=gelu2")
    assert result.returncode != 0
    assert "did you mean 'gelu'?" in result.stderr
    assert "Traceback" not in result.stderr + result.stdout


def test_negative_size_names_enc_sizes(run_main) -> None:
    result = run_main("summary", "model=cnn", "enc_sizes=[32,-4]")
    assert result.returncode != 0
    assert "model.enc_sizes[1]: must be positive, got -4" in result.stderr
    assert "Traceback" not in result.stderr


def test_shortcut_for_a_model_without_that_key_is_an_error(run_main) -> None:
    result = run_main("summary", "model=mlp", "enc_sizes=[8]")
    assert result.returncode != 0
    assert "enc_sizes: model 'mlp' does not take 'enc_sizes'" in result.stderr
    assert "hidden_sizes" in result.stderr


def test_graph_model_summary(run_main) -> None:
    result = run_main("summary", "model=graph")
    assert result.returncode == 0, result.stderr
    assert re.search(r"nodes\.skip1\s+Add\s+\[2, 32, 28, 28\]", result.stdout)


def test_hydra_flags_still_work_after_the_subcommand(run_main) -> None:
    result = run_main("summary", "model=mlp", "--cfg", "job")
    assert result.returncode == 0, result.stderr
    assert "hidden_sizes:" in result.stdout and "Total params" not in result.stdout
    helped = run_main("summary", "--help")
    assert helped.returncode == 0 and f"model: {SHIPPED_MODELS}" in helped.stdout


def test_summary_runs_hook_plugins_on_its_dummy_batch(run_main) -> None:
    result = run_main("summary", "model=cnn", "enc_sizes=[32,64]", "hooks=[verbose]", "hooks.verbose.layers=[encoder.*.pool]")
    assert result.returncode == 0, result.stderr
    lines = [line for line in (result.stdout + result.stderr).splitlines() if "modelforge.hooks.verbose" in line]
    assert [line.split(": ", 1)[1].split() for line in lines] == [
        ["encoder.0.pool", "MaxPool2d", "->", "[2,", "32,", "14,", "14]"],
        ["encoder.1.pool", "MaxPool2d", "->", "[2,", "64,", "7,", "7]"],
    ]

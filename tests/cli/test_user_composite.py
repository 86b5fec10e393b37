"""A composite block of the user's own, in a --config-dir blocks/ file, used as a user would."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.conftest import run_cli
from tests.helpers.mnist_idx import write_mnist_idx

pytestmark = pytest.mark.e2e

BLOCKS = """\
resunit:
  description: conv, conv and the input added back
  params: {width: '???', kernel: 3}
  nodes:
    conv1: {block: conv, args: {out_channels: width, kernel_size: kernel}}
    conv2: {block: conv, args: {out_channels: width, kernel_size: kernel, activation: null}}
    add:   {block: add, inputs: [input, conv2]}
"""

MODEL = """\
defaults:
  - /blocks/mine@blocks
  - _self_
name: graph
nodes:
  stem: {block: conv, args: {out_channels: 8, pool: max}}
  body: {block: resunit, args: {width: 8}, repeat: 3}
  gap:  {block: global_avg_pool}
  flat: {block: flatten}
  head: {block: nn.Linear, args: {out_features: n_classes}}
"""


GATE = """\
gate:
  description: squeeze-and-excitation, its squeeze width scaled with the model
  params: {channels: '???'}
  widths: [channels]
  nodes:
    pool:   {block: mean, args: {dim: [2, 3], keepdim: true}}
    reduce: {block: nn.Conv2d, args: {out_channels: channels, kernel_size: 1}}
    act:    {block: nn.ReLU}
    expand: {block: nn.Conv2d, args: {out_channels: in_channels, kernel_size: 1}}
    sig:    {block: nn.Sigmoid}
    mul:    {block: mul, inputs: [input, sig]}
"""

SCALED = """\
defaults:
  - /blocks/gates@blocks
  - _self_
name: graph
scale: n
scales: {n: [0.33, 0.25, 1024], s: [0.33, 0.5, 1024], m: [0.67, 0.75, 1024], l: [1.0, 1.0, 1024], x: [1.0, 1.25, 1024]}
nodes:
  stem: {block: conv, args: {out_channels: 64, stride: 2}}
  se:   {block: gate, args: {channels: 64}}
  body: {block: conv, args: {out_channels: 128}, repeat: 3}
  head: {block: nn.Conv2d, args: {out_channels: n_classes, kernel_size: 1}}   # a 1x1-conv classifier
  pool: {block: global_avg_pool}
  flat: {block: flatten}
"""


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("composite_project")
    (root / "configs" / "model").mkdir(parents=True)
    (root / "configs" / "blocks").mkdir()
    (root / "configs" / "blocks" / "mine.yaml").write_text(BLOCKS)
    (root / "configs" / "blocks" / "gates.yaml").write_text(GATE)
    (root / "configs" / "model" / "resnetish.yaml").write_text(MODEL)
    (root / "configs" / "model" / "typo.yaml").write_text(MODEL.replace("{width: 8}", "{widht: 8}"))
    (root / "configs" / "blocks" / "broken.yaml").write_text(BLOCKS.replace("out_channels: width, kernel_size: kernel, "
                                                                          "activation", "out_channels: widht * 2, "
                                                                          "kernel_size: kernel, activation"))
    (root / "configs" / "model" / "broken.yaml").write_text(MODEL.replace("/blocks/mine@", "/blocks/broken@"))
    (root / "configs" / "model" / "scaled.yaml").write_text(SCALED)
    (root / "configs" / "model" / "narrow_head.yaml").write_text(SCALED.replace("out_channels: n_classes", "out_channels: 8"))
    write_mnist_idx(root / "mnist", n_train=96, n_test=32)
    return root


def test_list_and_summary_show_the_users_composite(project: Path) -> None:
    listed = run_cli("list", "blocks", "res*", "--config-dir", "configs", cwd=project)
    assert listed.returncode == 0, listed.stderr
    assert re.search(r"resunit\(width, kernel=3\)\s+conv, conv and the input added back \[blocks/mine.yaml\]",
                     listed.stdout), listed.stdout
    summary = run_cli("summary", "--config-dir", "configs", "model=resnetish", cwd=project)
    assert summary.returncode == 0, summary.stderr
    assert re.search(r"nodes\.body\.2\s+resunit\s+\[2, 8, 14, 14\]\s+1,200", summary.stdout), summary.stdout
    assert "nodes.body.2.conv1" not in summary.stdout.split("Input shape")[1]  # one row per composite
    expanded = run_cli("summary", "--config-dir", "configs", "model=resnetish", "summary.expand=true", cwd=project)
    assert "nodes.body.2.conv1.conv" in expanded.stdout.split("Input shape")[1]


def test_it_trains_and_feature_capture_reaches_its_inner_layers(project: Path) -> None:
    result = run_cli(
        "train", "--config-dir", "configs", "model=resnetish", "trainer.fast_dev_run=true", "data.val_size=32",
        "data.verify=false", "trainer.accelerator=cpu", "trainer.enable_progress_bar=false",
        "hooks=[feature_capture]", "hooks.feature_capture.layers=['nodes.body.1.*']",
        "hooks.feature_capture.save_images=true", "hydra.run.dir=run",
        cwd=project, env={"MODELFORGE_DATA": str(project / "mnist")})
    assert result.returncode == 0, result.stderr[-3000:]
    images = sorted(p.name for p in (project / "run" / "features").glob("*.png"))
    assert any(n.startswith("nodes.body.1.conv1_") for n in images), images
    assert any(n.startswith("nodes.body.1.add_") for n in images), images
    assert not any(n.startswith("nodes.body.0.") for n in images), images


def test_a_parameter_typo_in_the_users_file_is_one_error(project: Path) -> None:
    result = run_cli("summary", "--config-dir", "configs", "model=typo", cwd=project)
    assert result.returncode == 2
    assert "model.nodes.body.args.widht: composite block 'resunit' has no parameter 'widht'" in result.stderr
    assert "did you mean 'width'?" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize(("scale", "width"), [("n", 16), ("s", 32), ("m", 48), ("l", 64), ("x", 80)])
def test_a_scaled_model_keeps_10_outputs_and_scales_the_composites_widths(run_main, project: Path, scale: str,
                                                                           width: int) -> None:
    result = run_main("summary", "--config-dir", "configs", "model=scaled", f"model.scale={scale}",
                      "summary.expand=true", cwd=project)
    assert result.returncode == 0, result.stderr
    table = result.stdout.split("Input shape")[1]
    assert re.search(r"^\(model\)\s+GraphModel\s+\[2, 10\]", table, re.M), table
    assert re.search(rf"nodes\.se\.reduce\s+Conv2d\s+\[2, {width}, 1, 1\]", table), table
    assert re.search(rf"nodes\.stem\s+ConvBlock\s+\[2, {width}, 14, 14\]", table), table


@pytest.mark.parametrize("scale", ["n", "x"])
def test_a_scaled_model_with_a_conv_head_trains(run_main, monkeypatch: pytest.MonkeyPatch, project: Path,
                                                scale: str) -> None:
    monkeypatch.setenv("MODELFORGE_DATA", str(project / "mnist"))
    result = run_main(
        "train", "--config-dir", "configs", "model=scaled", f"model.scale={scale}", "trainer.fast_dev_run=true",
        "data.val_size=32", "data.verify=false", "trainer.accelerator=cpu", "trainer.enable_progress_bar=false",
        "curves=false", f"hydra.run.dir=run_{scale}", cwd=project)
    assert result.returncode == 0, result.stderr[-3000:]
    assert re.search(rf"model scaled \(scale {scale}\): [0-9,]+ params, ", result.stdout + result.stderr)


def test_a_head_narrower_than_the_class_count_builds_and_is_one_error_in_train(
        run_main, monkeypatch: pytest.MonkeyPatch, project: Path) -> None:
    summary = run_main("summary", "--config-dir", "configs", "model=narrow_head", cwd=project)
    assert summary.returncode == 0, summary.stderr  # the builder builds what the file describes (issue 39.1)
    monkeypatch.setenv("MODELFORGE_DATA", str(project / "mnist"))
    result = run_main("train", "--config-dir", "configs", "model=narrow_head", "trainer.fast_dev_run=true",
                      "data.verify=false", "hydra.run.dir=run_narrow", cwd=project)
    assert result.returncode == 2
    assert result.stderr.splitlines()[0] == ("error: model.nodes.flat: the output node 'flat' gives 8 values per "
                                             "sample, but the data has 10 classes (model.n_classes)"), result.stderr
    assert "Traceback" not in result.stderr and not (project / "run_narrow").exists()


def test_an_error_inside_the_users_composite_names_its_file_and_line(run_main, project: Path) -> None:
    result = run_main("summary", "--config-dir", "configs", "model=broken", cwd=project)
    assert result.returncode == 2
    assert result.stderr.splitlines()[0] == (
        "error: model.blocks.resunit.nodes.conv2.args.out_channels: expression 'widht * 2': unknown parameter "
        f"'widht' [in model.nodes.body[0]] (defined at {project / 'configs' / 'blocks' / 'broken.yaml'}:6)")
    assert "did you mean 'width'?" in result.stderr and "Traceback" not in result.stderr

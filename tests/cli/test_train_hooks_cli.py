"""Hook plugins switched on from the `train` command line, on tiny generated MNIST."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.helpers.mnist_idx import write_mnist_idx
from tests.helpers.run_config import tiny_cli_args


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    folder = tmp_path_factory.mktemp("tiny_mnist")
    write_mnist_idx(folder, n_train=96, n_test=32)
    return tiny_cli_args(folder)


def test_verbose_prints_each_encoder_layer_with_its_shape(run_main, tiny: list[str], tmp_path: Path) -> None:
    result = run_main("train", "model=cnn", "enc_sizes=[32,64]", "hooks=[verbose]", "trainer.fast_dev_run=true",
                 *tiny, f"hydra.run.dir={tmp_path}")
    assert result.returncode == 0, result.stderr[-2000:]
    for name, shape in [("encoder.0.conv", "[32, 32, 28, 28]"), ("encoder.0.pool", "[32, 32, 14, 14]"),
                        ("encoder.1.conv", "[32, 64, 14, 14]"), ("encoder.1.pool", "[32, 64, 7, 7]")]:
        assert re.search(rf"{re.escape(name)}\s+\w+\s+-> {re.escape(shape)}", result.stdout), name


def test_feature_capture_saves_pngs_in_the_run_dir(run_main, tiny: list[str], tmp_path: Path) -> None:
    result = run_main("train", "model=cnn", "enc_sizes=[8,16]", "hooks=[feature_capture]",
                 "hooks.feature_capture.layers=[encoder.*]", "hooks.feature_capture.save_images=true",
                 "trainer.fast_dev_run=true", *tiny, f"hydra.run.dir={tmp_path}")
    assert result.returncode == 0, result.stderr[-2000:]
    pngs = list(tmp_path.rglob("*.png"))
    assert pngs and all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in pngs)


def test_pattern_matching_nothing_lists_real_layer_names(run_main, tiny: list[str], tmp_path: Path) -> None:
    result = run_main("train", "model=cnn", "enc_sizes=[8,16]", "hooks=[feature_capture]",
                 "hooks.feature_capture.layers=[nope.*]", "trainer.fast_dev_run=true", *tiny,
                 f"hydra.run.dir={tmp_path}")
    assert result.returncode == 2
    assert "hooks.feature_capture.layers[0]: 'nope.*' matches no module" in result.stderr
    assert "encoder.0.conv" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize(("args", "message"), [
    (["hooks=[verbose,grad_clipp]"], "hooks: unknown hooks option 'grad_clipp'\n  did you mean 'grad_clip'?"),
    (["model=cnnn"], "model: unknown model option 'cnnn'\n  did you mean 'cnn'?"),
    (["optim=adamm"], "optim: unknown optim option 'adamm'\n  did you mean 'adam'?"),
])
def test_unknown_group_option_suggests(run_main, args: list[str], message: str) -> None:
    result = run_main("summary", *args)
    assert result.returncode == 2 and message in result.stderr, result.stderr

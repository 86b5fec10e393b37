"""Hook plugins in `train` and `eval` runs (tiny generated MNIST): ablation changes the test metrics, grad_cam draws."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from modelforge.errors import ConfigError
from modelforge.train import evaluate, train
from tests.helpers.run_config import compose_train

pytestmark = pytest.mark.filterwarnings("ignore:.*treespec")


@pytest.fixture(scope="module")
def run_with_grad_cam(tiny_mnist: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    run_dir = tmp_path_factory.mktemp("run")
    cfg = compose_train(tiny_mnist, "model=cnn", "enc_sizes=[8,16]", "dec_sizes=[32]", "trainer.max_epochs=2",
                        "optim.lr=3e-2", "hooks=[grad_cam]", "hooks.grad_cam.layer=encoder.1",
                        "hooks.grad_cam.num_images=2")
    train(cfg, run_dir=run_dir)
    return run_dir


def eval_cfg(tiny_mnist: Path, run_dir: Path, *hooks: str):
    cfg = compose_train(tiny_mnist, *hooks)  # data + trainer + hooks groups, as `eval` composes them
    cfg.ckpt_path = str(run_dir / "checkpoints" / "last.ckpt")
    return cfg


def test_training_ends_with_a_grad_cam_png(run_with_grad_cam: Path) -> None:
    png = run_with_grad_cam / "grad_cam" / "encoder.1.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_eval_with_ablate_reports_the_ablated_accuracy(run_with_grad_cam: Path, tiny_mnist: Path,
                                                       tmp_path: Path) -> None:
    recorded = json.loads((run_with_grad_cam / "metrics.json").read_text())
    plain = evaluate(eval_cfg(tiny_mnist, run_with_grad_cam), run_dir=tmp_path / "plain")
    assert plain["test/acc"] == pytest.approx(recorded["test/acc"], abs=1e-6) and plain["test/acc"] > 0.3
    ablated = evaluate(eval_cfg(tiny_mnist, run_with_grad_cam, "hooks=[ablate]", "hooks.ablate.layers=[encoder.1]",
                                "hooks.ablate.channels=all"), run_dir=tmp_path / "ablated")
    assert ablated["test/acc"] < 0.25 < plain["test/acc"]  # one constant prediction for every digit
    stored = json.loads((tmp_path / "ablated" / "eval_metrics.json").read_text())
    assert stored["hooks"] == {"ablate": {"layers": ["encoder.1"], "channels": "all", "mode": "zero"}}


def test_eval_with_grad_cam_writes_the_png_and_prints_its_path(
        run_with_grad_cam: Path, tiny_mnist: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    evaluate(eval_cfg(tiny_mnist, run_with_grad_cam, "hooks=[grad_cam]", "hooks.grad_cam.layer=encoder.1"),
             run_dir=tmp_path)
    png = tmp_path / "grad_cam" / "encoder.1.png"
    assert png.is_file()
    assert capsys.readouterr().out.count(f"grad_cam heatmaps written to {png}\n") == 1


def test_eval_refuses_a_layer_that_matches_nothing_before_testing(run_with_grad_cam: Path, tiny_mnist: Path,
                                                                   tmp_path: Path) -> None:
    cfg = eval_cfg(tiny_mnist, run_with_grad_cam, "hooks=[ablate]", "hooks.ablate.layers=[encoder.9]")
    with pytest.raises(ConfigError, match=r"^hooks\.ablate\.layers\[0\]: 'encoder\.9' matches no module of CNN"):
        evaluate(cfg, run_dir=tmp_path)
    assert not (tmp_path / "eval_metrics.json").exists()

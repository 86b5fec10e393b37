"""load_model: a real (tiny) training run back as a plain module, its weights, metadata and errors."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import modelforge
from modelforge import CheckpointError, load_model
from modelforge.deploy.load import check_fits, load_checkpoint
from modelforge.deploy.metadata import model_metadata
from modelforge.train import train
from tests.helpers.mnist_idx import write_idx_set
from tests.helpers.run_config import compose_train

REPO = Path(__file__).resolve().parents[2]
SMALL = ["trainer.max_epochs=1", "model=cnn", "enc_sizes=[4]", "dec_sizes=[8]"]
EMA = ["callbacks=[ema]", "callbacks.ema.decay=0.5"]


@pytest.fixture(scope="session")
def tiny_data(tiny_mnist: Path) -> Path:
    return tiny_mnist  # the data small_cnn_run trained on


def _train(data: Path, run_dir: Path, *overrides: str) -> Path:
    train(compose_train(data, *SMALL, *overrides), run_dir=run_dir)
    return run_dir


@pytest.fixture
def run(small_cnn_run: Path) -> Path:
    return small_cnn_run  # _train's SMALL is SMALL_CNN


@pytest.fixture(scope="module")
def ema_run(tiny_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _train(tiny_data, tmp_path_factory.mktemp("runs") / "ema", *EMA)


def _weights(ckpt_path: Path, key: str = "state_dict") -> dict[str, torch.Tensor]:
    state = torch.load(ckpt_path, map_location="cpu", weights_only=True)[key]
    return {k.removeprefix("model."): v for k, v in state.items()}


def _test_accuracy(model: torch.nn.Module, data: Path) -> float:
    """By hand, as the acceptance snippet does: the test files, MNIST's normalization."""
    from modelforge.data.idx import parse_idx, read_idx_bytes

    images = parse_idx(read_idx_bytes(data / "t10k-images-idx3-ubyte.gz"), magic=2051).float().div(255)
    labels = parse_idx(read_idx_bytes(data / "t10k-labels-idx1-ubyte.gz"), magic=2049).long()
    with torch.no_grad():
        logits = model(((images - 0.1307) / 0.3081).unsqueeze(1))
    return float((logits.argmax(1) == labels).float().mean())


def test_a_checkpoint_gives_the_built_model_with_its_weights_in_eval_mode(run: Path, capsys) -> None:
    ckpt_path = run / "checkpoints" / "last.ckpt"
    model = load_model(ckpt_path)
    stored = torch.load(ckpt_path, map_location="cpu", weights_only=True)["hyper_parameters"]["config"]
    assert type(model).__name__ == "CNN" and not model.training
    assert model.model_config == stored["model"] and model.model_config["enc_sizes"] == [4]
    saved = _weights(ckpt_path)
    assert model.state_dict().keys() == saved.keys()
    assert all(torch.equal(model.state_dict()[k], v) for k, v in saved.items())
    assert model.checkpoint_path == ckpt_path
    assert f"loaded cnn from {ckpt_path}" in capsys.readouterr().err  # no logging set up: printed


def test_outputs_equal_the_five_hand_written_lines(run: Path) -> None:
    ckpt = torch.load(run / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    by_hand = modelforge.build_model(ckpt["hyper_parameters"]["config"]["model"])
    by_hand.load_state_dict({k.removeprefix("model."): v for k, v in ckpt["state_dict"].items()})
    by_hand.eval()
    x = torch.randn(5, 1, 28, 28)
    with torch.no_grad():
        assert torch.equal(load_model(run / "checkpoints" / "last.ckpt")(x), by_hand(x))


def test_a_run_directory_gives_its_last_checkpoint_and_says_so(run: Path, tiny_data: Path, capsys) -> None:
    metrics = json.loads((run / "metrics.json").read_text())
    model = load_model(run)
    assert model.checkpoint_path == run / "checkpoints" / "last.ckpt"
    assert f"loaded cnn from {run / 'checkpoints' / 'last.ckpt'} (the run's last checkpoint" in capsys.readouterr().err
    # The final weights: the ones metrics.json's test/acc measured.
    assert _test_accuracy(model, tiny_data) == pytest.approx(metrics["test/acc"], abs=1e-6)


def test_a_run_without_last_ckpt_gives_its_recorded_best(run: Path, tmp_path: Path, capsys) -> None:
    copy = shutil.copytree(run, tmp_path / "run")
    (copy / "checkpoints" / "last.ckpt").unlink()
    best = Path(json.loads((copy / "metrics.json").read_text())["best_ckpt"]).name
    assert load_model(copy).checkpoint_path == copy / "checkpoints" / best
    assert "(the run's best checkpoint: it has no last.ckpt)" in capsys.readouterr().err


def test_the_metadata_describes_the_model_and_round_trips_through_json(run: Path) -> None:
    meta = load_model(run).modelforge_meta
    assert meta == json.loads(json.dumps(meta))
    assert meta["input_shape"] == [1, 28, 28] and meta["data"] == "mnist"
    assert meta["normalize"] == {"mean": [0.1307], "std": [0.3081]}
    assert meta["class_names"] == [str(k) for k in range(10)]
    assert meta["model"]["name"] == "cnn" and meta["model"]["dec_sizes"] == [8]
    assert meta["modelforge_version"] == modelforge.__version__ and meta["torch_version"] == torch.__version__


def test_metadata_of_other_data_settings(tmp_path: Path) -> None:
    fashion = model_metadata({"model": {"name": "cnn", "n_classes": 10}, "data": {"name": "fashion_mnist"}})
    assert fashion["class_names"][:2] == ["T-shirt/top", "Trouser"] and fashion["normalize"]["mean"] == [0.286]
    raw = model_metadata({"model": {"name": "cnn"}, "data": {"name": "mnist", "normalize": False}})
    assert raw["normalize"] is None
    write_idx_set(tmp_path, n_classes=5, size=(20, 20))  # data=idx, mean: null: computed from the training images
    own = model_metadata({"model": {"name": "cnn", "n_classes": 5, "input_size": [20, 20]},
                          "data": {"name": "idx", "data_dir": str(tmp_path)}})
    assert own["class_names"] == ["0", "1", "2", "3", "4"] and own["input_shape"] == [1, 20, 20]
    assert 0.0 < own["normalize"]["mean"][0] < 1.0 and own["normalize"]["std"][0] > 0.0


def test_an_ema_run_gives_the_ema_weights_and_says_so(ema_run: Path, tiny_data: Path, capsys) -> None:
    last = ema_run / "checkpoints" / "last.ckpt"
    ckpt = torch.load(last, map_location="cpu", weights_only=True)
    assert "EMAWeightAveraging" in ckpt["callbacks"]  # Lightning's key for the callback's state
    ema, trained = _weights(last), _weights(last, "current_model_state")
    assert any(not torch.equal(ema[k], trained[k]) for k in ema)  # decay 0.5 over 4 steps: they differ
    model = load_model(last)
    assert "using the EMA weights" in capsys.readouterr().err
    assert all(torch.equal(model.state_dict()[k], v) for k, v in ema.items())
    # The run tested the averaged weights (Lightning copies them in when training ends).
    metrics = json.loads((ema_run / "metrics.json").read_text())
    assert _test_accuracy(model, tiny_data) == pytest.approx(metrics["test/acc"], abs=1e-6)
    plain = load_model(last, ema=False)
    assert all(torch.equal(plain.state_dict()[k], v) for k, v in trained.items())
    assert "ema=False: the trained weights" in capsys.readouterr().err


def test_bad_paths_and_foreign_files_are_evals_errors(run: Path, tmp_path: Path) -> None:
    from modelforge.train import run

    assert run.load_checkpoint is load_checkpoint and run.check_fits is check_fits  # eval's own
    with pytest.raises(CheckpointError, match=r"^ckpt_path: no checkpoint file at .*nowhere\.ckpt$"):
        load_model(tmp_path / "nowhere.ckpt")
    torch.save({"weights": torch.zeros(2)}, foreign := tmp_path / "foreign.ckpt")
    with pytest.raises(CheckpointError, match=r"foreign\.ckpt is not a modelforge checkpoint \(it has no stored run"):
        load_model(foreign)
    (garbage := tmp_path / "garbage.ckpt").write_bytes(b"not a checkpoint at all")
    with pytest.raises(CheckpointError, match=r"garbage\.ckpt is truncated or not a checkpoint \(a zip archive was "
                                              r"expected; it begins with text: 'not a checkpoint at all'\)$"):
        load_model(garbage)
    with pytest.raises(CheckpointError, match=r"no checkpoint in run directory .*: looked for .*last\.ckpt "
                                              r"\(it has no checkpoints/ folder"):
        load_model(tmp_path)


def test_a_run_dir_without_last_or_best_names_what_it_holds(run: Path, tmp_path: Path) -> None:
    copy = shutil.copytree(run, tmp_path / "run")
    (copy / "metrics.json").unlink()
    (copy / "checkpoints" / "last.ckpt").unlink()
    with pytest.raises(CheckpointError, match=r"it holds best-epoch01\.ckpt: name one \(ckpt_path="):
        load_model(copy)


def test_a_checkpoint_whose_weights_do_not_fit_its_config(run: Path, tmp_path: Path) -> None:
    ckpt = torch.load(run / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    ckpt["hyper_parameters"]["config"]["model"]["enc_sizes"] = [6]
    torch.save(ckpt, edited := tmp_path / "edited.ckpt")
    with pytest.raises(CheckpointError, match=r"holds a different model than this config builds \(checkpoint "
                                              r"model: cnn enc_sizes=\[6\] dec_sizes=\[8\]\); shapes differ: decoder\.0\.linear\.weight "
                                              r"\(8, 784\) vs \(8, 1176\), encoder"):
        load_model(edited)


@pytest.mark.e2e
def test_load_model_imports_no_lightning(run: Path) -> None:
    script = textwrap.dedent(f"""
        import sys, modelforge
        model = modelforge.load_model({str(run)!r})
        print(sorted(m for m in sys.modules if m.split(".")[0] in ("pytorch_lightning", "lightning", "lightning_fabric")))
    """)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=REPO, env=env,
                         check=False)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "[]"
    assert "loaded cnn from" in out.stderr

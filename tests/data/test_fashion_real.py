"""Slow: Fashion-MNIST from its real files (Debian's dataset-fashion-mnist; skips when not installed)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from modelforge.data import FASHION_MNIST, FILE_NAMES, find_file, load_idx_set

FASHION = Path(os.environ.get("MODELFORGE_REAL_FASHION_MNIST", "/usr/share/datasets/fashion-mnist"))

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not (FASHION / "train-images-idx3-ubyte.gz").is_file(),
                       reason=f"Fashion-MNIST not found at {FASHION} (apt-get install dataset-fashion-mnist, "
                              "or set MODELFORGE_REAL_FASHION_MNIST)"),
]


def test_real_files_match_the_known_checksums_and_stats() -> None:
    splits = load_idx_set({n: find_file(FASHION, n) for n in FILE_NAMES}, FASHION_MNIST)  # md5s, headers
    images = splits["train"][0].float() / 255
    assert float(images.mean()) == pytest.approx(FASHION_MNIST.mean, abs=1e-4)
    assert float(images.std()) == pytest.approx(FASHION_MNIST.std, abs=1e-4)
    assert len(splits["test"][1]) == 10000 and int(splits["train"][1].max()) == 9


def test_one_epoch_reaches_88_percent_and_names_the_data_set(cli, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    result = cli("train", "data=fashion_mnist", f"data.data_dir={FASHION}", "trainer.max_epochs=1",
                 f"hydra.run.dir={run_dir}", "trainer.enable_progress_bar=false", timeout=1800)
    assert result.returncode == 0, result.stderr[-3000:]
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["test/acc"] >= 0.88 and metrics["data"]["name"] == "fashion_mnist"
    assert "name: fashion_mnist" in (run_dir / "config.yaml").read_text()


def test_mnist_expected_but_fashion_given_says_to_use_data_fashion_mnist(cli, tmp_path: Path) -> None:
    result = cli("train", f"data.data_dir={FASHION}", "trainer.fast_dev_run=true", f"hydra.run.dir={tmp_path / 'r'}")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "this is Fashion-MNIST: use data=fashion_mnist" in result.stderr

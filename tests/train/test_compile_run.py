"""compile=true compiles a small, known number of graphs and says so: training steps only (validation and test run
eagerly), one graph for full batches and one for the ragged last batch, whatever the number of epochs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REAL_MNIST
from tests.helpers.run_config import tiny_cli_args

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")  # dynamo's notes


def test_a_compiled_run_counts_its_graphs_and_evaluation_compiles_none(run_main, tiny_mnist: Path,
                                                                        tmp_path: Path) -> None:
    # 128 training images in batches of 48: two full batches and a ragged one of 32, each epoch; a validation
    # pass every epoch and a test at the end. aot_eager: dynamo captures as inductor would, without codegen.
    result = run_main("train", "model=mlp", "model.hidden_sizes=[16]", "compile=true", "compile_backend=aot_eager",
                      "trainer.max_epochs=3", *tiny_cli_args(tiny_mnist), "data.batch_size=48",
                      f"hydra.run.dir={tmp_path / 'run'}")
    assert result.returncode == 0, result.stderr[-2000:]
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["status"] == "finished" and metrics["compile"]["graphs"] == 2  # full batch, ragged batch
    assert 0 < metrics["compile"]["seconds"] < metrics["train_time_s"]
    log = (tmp_path / "run" / "train.log").read_text()
    assert "compile=true: the first training step waits while torch.compile (aot_eager) compiles" in log
    assert "compile: 2 graph(s) in " in log


@pytest.mark.parametrize("override, says", [
    ("compile_backend=inductr", "error: compile_backend: unknown compile backend 'inductr'\n  did you mean 'inductor'?"),
    ("compile_mode=max-autotun", "did you mean 'max-autotune'?"),
    ("compile_backend=aot_eager compile_mode=max-autotune",
     "error: compile_mode: 'max-autotune' is a mode of the inductor backend, not of 'aot_eager'"),
])
def test_a_compile_option_torch_does_not_have_is_refused_before_the_run(run_main, tiny_mnist: Path, tmp_path: Path,
                                                                        override: str, says: str) -> None:
    result = run_main("train", "compile=true", *override.split(), *tiny_cli_args(tiny_mnist),
                      f"hydra.run.dir={tmp_path / 'run'}")
    assert result.returncode == 2 and says in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "run").exists()


@pytest.mark.slow  # inductor generates and builds C++ for each graph: about 30-40 s on 2 CPU cores, cold
def test_the_fast_recipe_compiles_with_inductor_and_finishes(run_main, tmp_path: Path) -> None:
    if not (REAL_MNIST / "train-images-idx3-ubyte.gz").exists():
        pytest.skip(f"real MNIST not found at {REAL_MNIST}")
    result = run_main("train", "experiment=fast", "compile=true", "trainer.limit_train_batches=50",
                      "trainer.limit_val_batches=5", "trainer.limit_test_batches=5", "trainer.accelerator=cpu",
                      f"data.data_dir={REAL_MNIST}", f"hydra.run.dir={tmp_path / 'run'}")
    assert result.returncode == 0, result.stderr[-2000:]
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["compile"]["graphs"] == 1 and metrics["test/acc"] > 0.5  # 50 full batches: no ragged one


def test_the_cudagraphs_backend_on_a_cpu_is_refused_in_one_error(run_main, tiny_mnist: Path, tmp_path: Path) -> None:
    # It captured nothing there, and torch printed a "skipping cudagraphs due to cpu device" block per graph.
    result = run_main("train", "compile=true", "compile_backend=cudagraphs", *tiny_cli_args(tiny_mnist),
                      f"hydra.run.dir={tmp_path / 'run'}")
    assert result.returncode == 2 and "Traceback" not in result.stderr and "skipping cudagraphs" not in result.stderr
    assert "error: compile_backend: 'cudagraphs' captures CUDA graphs, and this run trains on cpu" in result.stderr
    assert not (tmp_path / "run").exists()


@pytest.mark.e2e
def test_compile_without_a_cpp_compiler_is_refused_before_the_run(tiny_mnist: Path, tmp_path: Path) -> None:
    """A real process whose PATH holds no compiler (and no CXX): one error naming what is missing and the way out,
    exit 2, before any work (inductor failed with InvalidCxxCompiler at the first training step)."""
    empty = tmp_path / "bin"
    empty.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("CXX", "CC")}
    result = subprocess.run([sys.executable, "-m", "modelforge", "train", "compile=true", "model=mlp",
                             *tiny_cli_args(tiny_mnist), f"hydra.run.dir={tmp_path / 'run'}"],
                            env={**env, "PATH": str(empty), "HYDRA_FULL_ERROR": "0"}, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-2000:]
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert errors == ["error: compile: torch.compile's inductor backend needs a C++ compiler, and none runs here "
                      "(searched: g++ on PATH; No working C++ compiler found in torch._inductor.config.cpp.cxx: "
                      "(None, 'g++'))"]
    assert "hint: compile=false trains the same model uncompiled" in result.stderr
    assert not (tmp_path / "run").exists()

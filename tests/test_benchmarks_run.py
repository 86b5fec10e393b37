"""experiments/benchmarks/run.py runs (issue 39.6: its --quick exited 1 for months, unnoticed).

By default, the sections that need neither real MNIST nor a training process run at their smallest settings
(``--smoke``: one round each; the build section on the DenseNet graph, checked against torchvision first), into a
temporary folder: the recorded results are not touched. Under ``-m slow``, every section runs so (real MNIST).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REAL_MNIST, REPO

RUN = REPO / "experiments" / "benchmarks" / "run.py"
IN_PROCESS = ("build", "hotpath", "hooks")  # no MNIST, no training process


def _run(results: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "HYDRA_FULL_ERROR": "0", "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    return subprocess.run([sys.executable, str(RUN), "--smoke", "--results-dir", str(results), *args], cwd=REPO,
                          env=env, capture_output=True, text=True, timeout=900)


@pytest.mark.e2e
def test_the_in_process_sections_run_and_record(tmp_path: Path) -> None:
    recorded = {p.name: p.read_bytes() for p in (RUN.parent / "results").glob("*.json")}
    result = _run(tmp_path, *(arg for name in IN_PROCESS for arg in ("--only", name)))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert sorted(p.stem for p in tmp_path.glob("*.json")) == sorted(IN_PROCESS)
    build = json.loads((tmp_path / "build.json").read_text())
    assert build["mode"] == "smoke" and list(build["models"]) == ["densenet121 224", "densenet121 512"]
    assert build["models"]["densenet121 224"]["params"] == 7_978_856  # torchvision's, checked before timing
    table = (tmp_path / "RESULTS.md").read_text()
    assert "| densenet121 | 512x512 | 7,978,856 |" in table
    assert build["sides"][2:] == ["create_model (Hydra composes, then builds)"]
    assert all(f"{side} | vs constructor |" in table for side in build["sides"][1:])
    assert {p.name: p.read_bytes() for p in (RUN.parent / "results").glob("*.json")} == recorded


def _bench_run_module() -> Any:
    spec = importlib.util.spec_from_file_location("benchmarks_run", RUN)  # not `run`: the top-level run.py is
    bench = importlib.util.module_from_spec(spec)
    path = list(sys.path)
    try:
        spec.loader.exec_module(bench)
    finally:
        sys.path[:] = path  # it puts its own folder first, for its sibling files
    return bench


def test_sections_that_read_mnist_without_it_are_refused_before_any_work(tmp_path: Path, monkeypatch, capsys) -> None:
    bench = _bench_run_module()
    import modelforge.data

    offline = dataclasses.replace(modelforge.data.MNIST, mirrors=("http://127.0.0.1:9/",))  # refused at once
    monkeypatch.setattr(modelforge.data, "MNIST", offline)
    with pytest.raises(SystemExit) as stopped:
        bench.check_data(str(tmp_path / "none"), ["build", "overhead", "dataread"])
    assert stopped.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: MNIST files missing from data_dir {tmp_path / 'none'}: train-images-idx3-ubyte")
    assert err.splitlines()[-1] == ("  the sections overhead, dataread read MNIST; these do not: --only hooks "
                                    "--only hotpath --only build")
    bench.check_data(str(tmp_path / "none"), ["build", "hooks"])  # none reads MNIST: nothing to check


def test_a_run_of_every_section_leaves_build_out_without_torchvision(capsys) -> None:
    bench = _bench_run_module()
    assert "build" not in bench.sections_to_run(None, has_torchvision=False)
    assert capsys.readouterr().out.startswith("== build left out: it compares with torchvision 0.28, not installed")
    assert "build" in bench.sections_to_run(None, has_torchvision=True)
    assert bench.sections_to_run(["build"], has_torchvision=False) == ["build"]  # asked for: its own error says why


def test_only_full_settings_on_their_device_write_over_the_recorded_figures() -> None:
    bench = _bench_run_module()
    RESULTS_DIR, default_results_dir = bench.RESULTS_DIR, bench.default_results_dir  # noqa: N806
    outputs = REPO / "outputs" / "benchmarks"
    assert default_results_dir(False, False, "gpu", ["build"]) == RESULTS_DIR
    assert default_results_dir(False, False, "gpu", ["gpu"]) == RESULTS_DIR
    assert default_results_dir(False, True, "gpu", ["build", "loop"]) == outputs / "quick"
    assert default_results_dir(True, True, "gpu", ["build"]) == outputs / "smoke"
    assert default_results_dir(False, False, "cpu", ["gpu"]) == outputs / "gpu-on-cpu"


@pytest.mark.slow
@pytest.mark.skipif(not REAL_MNIST.is_dir(), reason=f"needs real MNIST at {REAL_MNIST}")
def test_every_section_runs(tmp_path: Path) -> None:
    result = _run(tmp_path, "--data-dir", str(REAL_MNIST))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert {p.stem for p in tmp_path.glob("*.json")} == {"overhead", "loop", "hooks", "hotpath", "dataread",
                                                         "startup", "build"}

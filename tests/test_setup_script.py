"""run.py, the set-up script of the README's two commands: the torch build it picks for a machine, what it leaves
alone, when it installs again; and, under -m slow, both commands in a fresh clone with no environment."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.conftest import REAL_MNIST, REPO

_SPEC = importlib.util.spec_from_file_location("setup_script", REPO / "run.py")
setup_script = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(setup_script)


def _path_with(tmp_path: Path, gpu: bool) -> str:
    """A PATH whose only nvidia-smi (when ``gpu``) is a real executable that lists one GPU, as the driver's does."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    if gpu:
        smi = bin_dir / "nvidia-smi"
        smi.write_text("#!/bin/sh\necho 'GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-0000)'\n")
        smi.chmod(0o755)
    return os.pathsep.join([str(bin_dir), "/usr/bin", "/bin"])


def test_a_machine_with_a_gpu_gets_the_cuda_build(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("MODELFORGE_TORCH", raising=False)
    monkeypatch.setenv("PATH", _path_with(tmp_path, gpu=True))
    monkeypatch.setattr(setup_script.platform, "system", lambda: "Linux")
    assert setup_script.has_cuda_gpu()
    assert [args for _, args in setup_script.torch_choices()] == [["torch"]]  # PyPI's Linux wheel is a CUDA build


def test_a_machine_without_one_gets_the_cpu_build_first(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("MODELFORGE_TORCH", raising=False)
    monkeypatch.setenv("PATH", _path_with(tmp_path, gpu=False))
    monkeypatch.setattr(setup_script.platform, "system", lambda: "Linux")
    assert not setup_script.has_cuda_gpu()
    choices = [args for _, args in setup_script.torch_choices()]
    assert choices[0][:3] == ["torch", "--index-url", "https://download.pytorch.org/whl/cpu"]
    assert choices[1] == ["torch"]  # the CPU index out of reach: PyPI's build, which runs on a CPU too


def test_modelforge_torch_overrides_the_guess(monkeypatch) -> None:
    monkeypatch.setenv("MODELFORGE_TORCH", "torch==2.13.0 --index-url https://example.org/simple")
    assert [args for _, args in setup_script.torch_choices()] == [
        ["torch==2.13.0", "--index-url", "https://example.org/simple"]]


def test_a_torch_already_installed_is_left_alone(capsys) -> None:
    setup_script.install_torch(Path(sys.executable))  # this environment has torch: nothing is installed
    assert f"torch {torch.__version__} is installed in the environment: left as it is" in capsys.readouterr().out


def test_the_project_is_installed_again_only_when_needed(tmp_path: Path, capsys, monkeypatch) -> None:
    calls: list[tuple[str, ...]] = []
    monkeypatch.setattr(setup_script, "pip", lambda python, *args, quiet=True: calls.append(args) or 0)
    stamp = {"pyproject": setup_script.pyproject_digest(), "root": str(setup_script.ROOT), "extras": ["dev"]}
    (tmp_path / setup_script.STAMP).write_text(json.dumps(stamp))
    setup_script.install_project(Path(sys.executable), tmp_path, ("dev",))
    setup_script.install_project(Path(sys.executable), tmp_path, ())
    assert calls == []  # installed with these extras from this pyproject.toml: nothing to do
    setup_script.install_project(Path(sys.executable), tmp_path, ("docs",))
    assert ("-e", ".[dev,docs]") in calls  # dev is kept; setuptools' default editable mode (no compat warning)
    assert json.loads((tmp_path / setup_script.STAMP).read_text())["extras"] == ["dev", "docs"]


def test_an_unknown_command_names_the_known_ones_in_one_line_and_exits_2(capsys) -> None:
    assert setup_script.main(["tarin"]) == 2
    err = capsys.readouterr().err
    assert err == ("error: unknown command 'tarin' (did you mean 'train'?); run.py's commands: train, test, docs, "
                   "eval, summary, export, predict, list, diff\n")


def test_no_command_prints_the_usage_and_exits_2(capsys) -> None:
    assert setup_script.main([]) == 2
    assert "python3 run.py train" in capsys.readouterr().err


def test_every_modelforge_command_passes_through() -> None:
    from modelforge.__main__ import COMMANDS as MODELFORGE_COMMANDS

    passed = {name: argv for name, (_, argv) in setup_script.COMMANDS.items() if argv[:2] == ["-m", "modelforge"]}
    assert set(passed) == set(MODELFORGE_COMMANDS)
    assert all(argv == ["-m", "modelforge", name] for name, argv in passed.items())
    # each installs the training stack: after any of them, every command of the pages runs in the environment
    assert all("train" in setup_script.COMMANDS[name][0] for name in passed)


def test_a_new_environment_prints_its_activation_line_once(tmp_path: Path, capsys, monkeypatch) -> None:
    """run.py summary in a checkout without an environment: the environment is made (torch and the project
    installs stubbed out), the activation line printed, and the command exec'd in it with its arguments."""
    env = tmp_path / "venv"
    monkeypatch.setenv("MODELFORGE_VENV", str(env))
    monkeypatch.setenv("MODELFORGE_EXEC_AT", "0")  # main sets it for the exec'd command: restored afterwards
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(setup_script.venv.EnvBuilder, "create",
                        lambda self, path: (Path(path) / "bin").mkdir(parents=True) or
                        (Path(path) / "bin" / "python").write_text(""))
    monkeypatch.setattr(setup_script, "install_torch", lambda python: None)
    monkeypatch.setattr(setup_script, "install_project", lambda python, env, extras: None)
    execs: list[list[str]] = []
    monkeypatch.setattr(setup_script.os, "execv", lambda path, argv: execs.append(argv))
    setup_script.main(["summary", "model=cnn"])
    setup_script.main(["summary", "model=mlp"])  # the environment exists now: no second line
    out = capsys.readouterr().out
    assert out.count(". venv/bin/activate") == 1, out
    assert execs == [[str(env / "bin" / "python"), "-m", "modelforge", "summary", f"model={m}"] for m in ("cnn", "mlp")]


@pytest.mark.slow
def test_both_commands_in_a_fresh_clone(tmp_path: Path) -> None:
    """`git clone`, then the README's two commands with nothing typed before them but the data line: the
    environment is made, torch and the project installed, the main job trains (shortened here) and tests pass."""
    if not (REAL_MNIST / "t10k-images-idx3-ubyte.gz").is_file():
        pytest.skip(f"real MNIST not found at {REAL_MNIST}")
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "--quiet", str(REPO), str(clone)], check=True)
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "MODELFORGE_VENV")}
    env["PATH"] = os.pathsep.join(p for p in env["PATH"].split(os.pathsep) if not p.startswith(sys.prefix))
    # the torch of this environment, which this machine's pip finds locally (no internet here but PyPI)
    env.setdefault("MODELFORGE_TORCH", f"torch=={torch.__version__.split('+')[0]}")
    base = "/usr/bin/python3" if Path("/usr/bin/python3").is_file() else sys._base_executable
    train = subprocess.run([base, "run.py", "train", "trainer.max_epochs=1", "trainer.limit_train_batches=20",
                            "trainer.limit_val_batches=5", "trainer.limit_test_batches=5"],
                           cwd=clone, env={**env, "MODELFORGE_DATA": str(REAL_MNIST)}, capture_output=True, text=True,
                           timeout=3000)
    assert train.returncode == 0, train.stdout[-3000:] + train.stderr[-3000:]
    assert "test/acc" in train.stdout + train.stderr
    assert "activate it first: . .venv/bin/activate" in train.stdout
    # the README's next commands, in a new shell: through run.py, and in the activated environment
    summary = subprocess.run([base, "run.py", "summary", "model=cnn"], cwd=clone, env=env, capture_output=True,
                             text=True, timeout=600)
    assert summary.returncode == 0 and "Total params: 421,834" in summary.stdout, summary.stderr[-3000:]
    activated = subprocess.run(["bash", "-c", ". .venv/bin/activate && python -m modelforge list models 'resnet*'"],
                               cwd=clone, env=env, capture_output=True, text=True, timeout=600)
    assert activated.returncode == 0 and "resnet18" in activated.stdout, activated.stderr[-3000:]
    tests = subprocess.run([base, "run.py", "test", "tests/test_packaging.py", "-q", "-n", "0"], cwd=clone, env=env,
                           capture_output=True, text=True, timeout=3000)
    assert tests.returncode == 0, tests.stdout[-3000:] + tests.stderr[-3000:]
    assert (clone / ".venv" / "torchvision-tests").is_dir()

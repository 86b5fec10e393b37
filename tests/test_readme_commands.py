"""The README's commands stay runnable: every one is known to experiments/readme_commands.py and composes.

The cheap checks run by default (no training); the slow test runs every command as a real process.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.override_parser.overrides_parser import OverridesParser

from modelforge.config import conf_dir
from tests.conftest import REAL_MNIST, REPO

_SPEC = importlib.util.spec_from_file_location("readme_commands", REPO / "experiments" / "readme_commands.py")
readme_commands = importlib.util.module_from_spec(_SPEC)
sys.modules["readme_commands"] = readme_commands
_SPEC.loader.exec_module(readme_commands)

COMMANDS = readme_commands.extract()
COMPOSED = ("train", "eval", "summary", "export", "predict")


def test_the_readme_has_its_commands() -> None:
    texts = [command.text for command in COMMANDS]
    assert "python -m modelforge train model=cnn enc_sizes=[32,64]" in texts  # the main job, twice
    assert len(COMMANDS) >= 45
    errors = [command for command in COMMANDS if command.error_lines]
    assert [command.argv[-1] for command in errors] == ["activation=gelu2", "trainer.max_epoch=2",
                                                      "+lable_smoothing=0.1"]
    assert errors[0].error_lines[:2] == ["error: model.activation: unknown activation 'gelu2'",
                                         "  did you mean 'gelu'?"]


def test_continued_commands_are_joined_and_comments_read() -> None:
    sweep = next(c for c in COMMANDS if "hydra.sweep.dir=sweep4" in c.text)
    assert sweep.argv[-1] == "hydra.sweep.dir=sweep4" and "\\" not in sweep.text
    seed = next(c for c in COMMANDS if "model=seed_cnn" in c.text)
    assert seed.comment == "Total params: 51,410,506" and seed.argv[-1] == "model=seed_cnn"
    export = next(c for c in COMMANDS if c.text == "python -m modelforge export ckpt_path=RUN/checkpoints/last.ckpt format=onnx")
    assert [line.split()[:2] for line in export.shown] == [["exported", "cnn"], ["check", "passed:"]]


def test_every_command_runs_here_or_is_skipped_with_a_reason() -> None:
    skipped = {command.text.split()[0]: readme_commands.skip_reason(command) for command in COMMANDS
               if readme_commands.skip_reason(command)}
    # the Slurm and two-node launches only; everything else runs on a laptop
    assert set(skipped) <= {"srun", "torchrun", "python"}, skipped
    assert all(reason and reason.startswith("needs") or "Fashion-MNIST" in reason for reason in skipped.values())


def test_every_path_a_command_reads_has_a_maker() -> None:
    read = {path: readme_commands.placeholder_of(path) for c in COMMANDS for path in readme_commands.paths_read(c)}
    assert {"RUN/checkpoints/last.ckpt", "my_digits/", "scans/*.jpg", "my_idx_folder", "runs/mnist",
            "configs"} <= set(read)
    assert all(read.values()), [path for path, maker in read.items() if not maker]


def test_the_user_project_files_come_from_the_readme() -> None:
    files = readme_commands.readme_files()
    assert set(files) == {"configs/model/my_model.yaml", "configs/experiment/quick.yaml",
                          "my_blocks/my_blocks/__init__.py", "my_blocks/pyproject.toml"}
    assert "residual_conv" in files["configs/model/my_model.yaml"]
    assert '[project.entry-points."modelforge.plugins"]' in files["my_blocks/pyproject.toml"]


def test_trainings_are_shortened_and_say_so() -> None:
    argv, changes = readme_commands.shortened(
        "python -m modelforge train -m hparams_search=architecture hydra.sweeper.n_trials=6".split())
    assert argv[:5] == "python -m modelforge train -m".split()
    assert argv[5:] == ["hparams_search=architecture", "hydra.sweeper.n_trials=2", "trainer.limit_train_batches=2",
                        "trainer.limit_val_batches=2", "trainer.limit_test_batches=2"]
    assert changes == ["trainer.limit_train_batches=2", "trainer.limit_val_batches=2", "trainer.limit_test_batches=2",
                       "hydra.sweeper.n_trials=6 -> 2"]
    fast = "python -m modelforge train trainer.fast_dev_run=true".split()
    assert readme_commands.shortened(fast) == (fast, [])


def _modelforge_args(argv: list[str]) -> tuple[str, list[str], bool]:
    """The subcommand, its overrides (Hydra flags dropped) and whether it is a multirun."""
    rest = argv[argv.index("modelforge") + 1:]
    command, overrides, multirun = rest[0], [], False
    skip_next = False
    for arg in rest[1:]:
        if skip_next:
            skip_next = False
        elif arg in ("-m", "--multirun"):
            multirun = True
        elif arg == "--config-dir":
            skip_next = True
        else:
            overrides.append(arg)
    return command, overrides, multirun


def _first_of_each_sweep(overrides: list[str]) -> list[str]:
    parsed = OverridesParser.create().parse_overrides(overrides)
    return [f"{o.get_key_element()}={next(iter(o.sweep_string_iterator()))}" if o.is_sweep_override()
            else o.input_line for o in parsed]


@pytest.mark.parametrize("command", [c for c in COMMANDS if not c.error_lines and "-m modelforge" in c.text
                                     and _modelforge_args(c.argv)[0] in COMPOSED
                                     and not any(a.startswith("model=configs/") for a in c.argv)],
                         ids=lambda c: f"README:{c.line}")
def test_command_composes(command, tmp_path: Path) -> None:
    """Hydra composes the command's config (a sweep: its first job), as the CLI would, without running it."""
    name, overrides, multirun = _modelforge_args(command.argv)
    if multirun:
        overrides = _first_of_each_sweep(overrides)
    if "--config-dir" in command.argv:
        for relative, text in readme_commands.readme_files().items():
            (tmp_path / relative).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / relative).write_text(text)
        overrides.append(f"hydra.searchpath=[file://{tmp_path / 'configs'}]")
    overrides = [o.replace("$MODELFORGE_DATA", "/data") for o in overrides]
    with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
        cfg = compose(name, overrides=overrides)
    assert cfg is not None


@pytest.mark.slow
def test_every_readme_command_runs_as_written() -> None:
    if not (REAL_MNIST / "t10k-images-idx3-ubyte.gz").is_file():
        pytest.skip(f"real MNIST not found at {REAL_MNIST}")
    env = {**os.environ, "MODELFORGE_DATA": str(REAL_MNIST)}
    done = subprocess.run([sys.executable, str(REPO / "experiments" / "readme_commands.py")], env=env,
                          capture_output=True, text=True, timeout=3600)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
    assert " 0 not as the README says" in done.stdout


def test_a_command_past_its_time_is_killed_with_everything_it_started(tmp_path: Path) -> None:
    """A sweep's jobs or torchrun's ranks must not outlive the command (a timeout, or the script stopped)."""
    pid_file = tmp_path / "grandchild.pid"
    with pytest.raises(subprocess.TimeoutExpired):
        readme_commands.run_process(["sh", "-c", f"sleep 60 & echo $! > {pid_file}; wait"], timeout=1.0)
    stat = Path(f"/proc/{pid_file.read_text().strip()}/stat")
    for _ in range(50):  # gone, or a zombie until init reaps it
        if not stat.exists() or stat.read_text().split(")")[-1].split()[0] == "Z":
            break
        time.sleep(0.1)
    else:
        raise AssertionError("the command's own child outlived it")

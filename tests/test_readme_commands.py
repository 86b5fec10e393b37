"""The README's and the documentation's commands stay runnable: every one is known to experiments/readme_commands.py,
composes, and writes only under outputs/; the script itself never leaves a process or a directory behind.

The cheap checks run by default (no training); the slow test runs every command as a real process.
"""

from __future__ import annotations

import importlib.util
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.override_parser.overrides_parser import OverridesParser

from modelforge import BLOCKS
from modelforge.config import conf_dir
from tests.conftest import REAL_MNIST, REPO
from tests.helpers.mnist_idx import write_mnist_idx

_SPEC = importlib.util.spec_from_file_location("readme_commands", REPO / "experiments" / "readme_commands.py")
readme_commands = importlib.util.module_from_spec(_SPEC)
sys.modules["readme_commands"] = readme_commands
_SPEC.loader.exec_module(readme_commands)

COMMANDS = readme_commands.extract()
RUN = [c for c in COMMANDS if c.kind != "python" and c.runs_modelforge and not readme_commands.not_run_reason(c)]
COMPOSED = ("train", "eval", "summary", "export", "predict")
PAGES = readme_commands.pages()


def test_the_pages_have_their_commands() -> None:
    assert {p.relative_to(REPO).as_posix() for p in PAGES} >= {
        "README.md", "docs/getting-started.md", "docs/model-language.md", "docs/training.md", "docs/hooks.md",
        "docs/sweeps.md", "docs/deploy.md", "docs/fine-tuning.md", "docs/own-project.md", "docs/errors.md"}
    texts = [command.text for command in COMMANDS]
    assert any(text.startswith("python3 run.py train    # the main job") for text in texts)
    assert len(RUN) >= 55
    assert sum(c.kind == "python" for c in COMMANDS) >= 8
    errors = [c for c in COMMANDS if c.error_lines and not readme_commands.not_run_reason(c)]
    assert [command.argv[-1] for command in errors[:3]] == ["activation=gelu2", "trainer.max_epoch=2",
                                                          "+lable_smoothing=0.1"]
    assert errors[0].error_lines[:2] == ["error: model.activation: unknown activation 'gelu2'",
                                         "  did you mean 'gelu'?"]
    # the error pages' transcripts run too, each with the set-up its files under bad/ and model/ give it
    on_errors_page = [c for c in errors if c.page.startswith("docs/errors")]
    assert len(on_errors_page) >= 60
    not_run = [c for c in COMMANDS if c.page.startswith("docs/errors") and readme_commands.not_run_reason(c)]
    assert len(not_run) <= 10, [c.text for c in not_run]


def test_a_transcript_is_read_as_its_error_lines_its_other_lines_and_its_exit() -> None:
    diverged = next(c for c in COMMANDS if c.kind == "transcript" and "optim.lr=1e6" in c.text)
    assert diverged.expected_exit == 3 and diverged.error_lines[0].startswith("error: training diverged")
    unreadable = next(c for c in COMMANDS if c.kind == "transcript" and c.text.endswith("inputs=bad/digits/"))
    assert unreadable.expected_exit == 0 and unreadable.error_lines == []
    assert unreadable.shown[0].startswith("[WARNING] modelforge.deploy.images: could not read 2 of 3 files")
    assert readme_commands.matches("error: no space left in ... to write last.pt2: it needs about ...",
                                   "error: no space left in /mnt/x to write last.pt2: it needs about 1.7 MB, ...")
    assert not readme_commands.matches("error: model.scale: unknown scale 'q'", "error: model.scale: unknown 'q'")


def test_the_readme_is_a_front_door() -> None:
    """At most about 250 lines; its first screen says what modelforge is and holds both commands and the data line."""
    lines = (REPO / "README.md").read_text().splitlines()
    assert len(lines) <= 250
    first_screen = "\n".join(lines[:25])
    for needed in ("YAML", "python3 run.py train", "python3 run.py test", "MODELFORGE_DATA=/path/to/mnist"):
        assert needed in first_screen, needed
    assert "/work/" not in "\n".join(lines)  # no path of a particular machine


def test_continued_commands_are_joined_and_comments_read() -> None:
    sweep = next(c for c in COMMANDS if "hydra.sweep.dir=outputs/sweep4" in c.text)
    assert sweep.argv[-1] == "hydra.sweep.dir=outputs/sweep4" and "\\" not in sweep.text
    seed = next(c for c in COMMANDS if c.text.startswith("python -m modelforge summary model=seed_cnn"))
    assert seed.comment == "Total params: 51,410,506" and seed.argv[-1] == "model=seed_cnn"
    onnx = "python -m modelforge export ckpt_path=RUN/checkpoints/last.ckpt format=onnx"
    export = next(c for c in COMMANDS if c.text == onnx)
    assert [line.split()[:2] for line in export.shown] == [["exported", "cnn"], ["check", "passed:"]]
    block = next(c for c in COMMANDS if c.kind == "python" and "207,018" in c.text)
    assert readme_commands.printed_words(block) == ["207,018", "{'module'"]


def test_every_command_is_known_and_every_block_has_a_language() -> None:
    """A command the script neither runs nor has a reason to leave out fails here, as does a bare ``` fence (the
    script reads a block by its language)."""
    assert [c.where + " " + c.text for c in readme_commands.unknown(COMMANDS)] == []
    bare = [f"{page.relative_to(REPO)}:{line}" for page in PAGES
            for language, line, _ in readme_commands.fenced_blocks(page) if not language]
    assert bare == []
    not_run = {readme_commands.not_run_reason(c) for c in COMMANDS} - {None}
    assert any("set-up script" in reason for reason in not_run)


def test_every_command_runs_here_or_is_skipped_with_a_reason() -> None:
    skipped = {command.text.split()[0]: readme_commands.skip_reason(command) for command in RUN
               if readme_commands.skip_reason(command)}
    # the Slurm and two-node launches only; everything else runs on a laptop
    assert set(skipped) <= {"srun", "torchrun", "python"}, skipped
    assert all(reason and reason.startswith("needs") or "Fashion-MNIST" in reason for reason in skipped.values())


def test_every_path_a_command_reads_has_a_maker() -> None:
    """A command shown failing on a path that is not there (no checkpoint at ...) needs none."""
    read = {path: readme_commands.placeholder_of(path) for c in RUN if not c.error_lines
            for path in readme_commands.paths_read(c)}
    assert {"RUN/checkpoints/last.ckpt", "my_digits/", "scans/*.jpg", "my_idx_folder", "outputs/runs/mnist",
            "configs", "my_pictures", "bad/digits/", "outputs/fashion_pngs"} <= set(read)
    assert all(read.values()), [path for path, maker in read.items() if not maker]


def test_every_path_a_command_writes_is_under_outputs() -> None:
    """Run in a checkout, the pages' commands leave nothing that git does not ignore (outputs/ is ignored); a command
    refused before any work (exit 2: an output path that cannot be written) writes nothing."""
    written = {path for c in RUN if c.expected_exit != 2 for path in readme_commands.paths_written(c)}
    assert {"outputs/sweep4", "outputs/runs/mnist", "outputs/deploy/", "outputs/graph.svg"} <= written
    assert [path for path in written if not path.startswith("outputs/")] == []
    ignored = subprocess.run(["git", "check-ignore", "-q", "outputs/anything"], cwd=REPO)
    assert ignored.returncode == 0


def test_the_user_project_files_come_from_the_pages() -> None:
    files = readme_commands.project_files()
    assert {"configs/model/my_model.yaml", "configs/experiment/quick.yaml", "my_blocks/my_blocks/__init__.py",
            "my_blocks/pyproject.toml"} <= set(files)
    # the files of docs/errors.md's examples: a user's model files with a mistake each, and two hostile configs
    assert {"configs/model/typo.yaml", "configs/blocks/mine.yaml", "model/float.yaml", "model/moved.yaml",
            "configs/experiment/tagged.yaml"} <= set(files)
    assert all(path.startswith(("configs/", "my_blocks/", "model/")) for path in files)
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
    code, limits = readme_commands.shortened_python('cfg = compose("train", overrides=["model=cnn"])\n')
    assert code == ('cfg = compose("train", overrides=["trainer.limit_train_batches=2", "trainer.limit_val_batches=2", '
                    '"trainer.limit_test_batches=2", "model=cnn"])\n') and len(limits) == 3


def test_every_block_has_an_example_on_the_model_language_page() -> None:
    """Each registered block is used in a model-example of docs/ops.md (built, with its summary, when the site is
    built): a new block needs its example there."""
    used = set()
    for language, _, body in readme_commands.fenced_blocks(REPO / "docs" / "ops.md"):
        if language == "{model-example}":
            used |= set(re.findall(r"block: ([\w.]+)", "\n".join(body)))
    assert sorted(set(BLOCKS.names(plugins=False)) - used) == []


def test_every_picture_is_drawn_by_make_figures() -> None:
    spec = importlib.util.spec_from_file_location("make_figures", REPO / "experiments" / "make_figures.py")
    make_figures = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(make_figures)
    drawn = {*make_figures.FIGURES, make_figures.OVERVIEW}
    shown = {name for page in PAGES for name in re.findall(r"figures/([\w.-]+\.png)", page.read_text())}
    assert shown and shown <= drawn, shown - drawn
    assert all((REPO / "docs" / "figures" / name).is_file() for name in shown)


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


@pytest.mark.parametrize("command", [c for c in RUN if not c.error_lines and "-m modelforge" in c.text
                                     and _modelforge_args(c.argv)[0] in COMPOSED
                                     and not any(a.startswith("model=configs/") for a in c.argv)],
                         ids=lambda c: c.where)
def test_command_composes(command, tmp_path: Path) -> None:
    """Hydra composes the command's config (a sweep: its first job), as the CLI would, without running it."""
    name, overrides, multirun = _modelforge_args(command.argv)
    if multirun:
        overrides = _first_of_each_sweep(overrides)
    if "--config-dir" in command.argv:
        for relative, text in readme_commands.project_files().items():
            (tmp_path / relative).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / relative).write_text(text)
        overrides.append(f"hydra.searchpath=[file://{tmp_path / 'configs'}]")
    overrides = [o.replace("$MODELFORGE_DATA", "/data") for o in overrides]
    with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
        cfg = compose(name, overrides=overrides)
    assert cfg is not None


@pytest.mark.slow
def test_every_command_of_the_pages_runs_as_written() -> None:
    if not (REAL_MNIST / "t10k-images-idx3-ubyte.gz").is_file():
        pytest.skip(f"real MNIST not found at {REAL_MNIST}")
    env = {**os.environ, "MODELFORGE_DATA": str(REAL_MNIST)}
    done = subprocess.run([sys.executable, str(REPO / "experiments" / "readme_commands.py")], env=env,
                          capture_output=True, text=True, timeout=3600)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
    assert " 0 not as the pages say" in done.stdout


# --- the script's own processes: real signals to real processes ---

def _alive(pid: int) -> bool:
    """The process runs (a zombie waiting for init to reap it counts as gone)."""
    stat = Path(f"/proc/{pid}/stat")
    try:
        return stat.read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def _processes_naming(text: str) -> list[int]:
    """Live processes whose command line holds ``text``."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if text in (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"):
                    found.append(int(entry.name))
            except OSError:
                continue
    return [pid for pid in found if _alive(pid)]


def _gone(pids: list[int], seconds: float = 5.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not any(_alive(pid) for pid in pids):
            return True
        time.sleep(0.05)
    return False


def test_a_command_past_its_time_is_killed_with_everything_it_started(tmp_path: Path) -> None:
    """A sweep's jobs or torchrun's ranks must not outlive the command (a timeout, or the script stopped)."""
    pid_file = tmp_path / "grandchild.pid"
    with pytest.raises(subprocess.TimeoutExpired):
        readme_commands.run_process(["sh", "-c", f"sleep 60 & echo $! > {pid_file}; wait"], timeout=2.0)
    assert _gone([int(pid_file.read_text())]), "the command's own child outlived it"


@pytest.mark.e2e
def test_a_sigkilled_script_leaves_no_process_behind(tmp_path: Path) -> None:
    """SIGKILL gives the script no chance to clean up: the guard of the command's process group (told by the kernel,
    PR_SET_PDEATHSIG) kills the command and what it started."""
    pid_file = tmp_path / "grandchild.pid"
    driver = (f"import importlib.util, sys; spec = importlib.util.spec_from_file_location('rc', "
              f"{str(REPO / 'experiments' / 'readme_commands.py')!r}); rc = importlib.util.module_from_spec(spec); "
              f"sys.modules['rc'] = rc; spec.loader.exec_module(rc); "
              f"rc.run_process(['sh', '-c', 'sleep 60 & echo $! > {pid_file}; wait'])")
    proc = subprocess.Popen([sys.executable, "-c", driver])
    deadline = time.monotonic() + 30
    while not (pid_file.is_file() and pid_file.read_text().strip()) and time.monotonic() < deadline:
        time.sleep(0.05)
    grandchild = int(pid_file.read_text())
    shells = _processes_naming(f"echo $! > {pid_file}")
    assert _alive(grandchild) and shells
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert _gone([grandchild, *shells]), "the command ran on after the script was killed"


@pytest.mark.e2e
def test_ctrl_c_pressed_repeatedly_stops_once_without_a_traceback(tmp_path: Path) -> None:
    """SIGINT after SIGINT while the script trains RUN: one line, exit 130, no training left, no directory left."""
    data, scratch = tmp_path / "mnist", tmp_path / "tmp"
    write_mnist_idx(data, n_train=64, n_test=32)
    scratch.mkdir()
    env = {**os.environ, "MODELFORGE_DATA": str(data), "TMPDIR": str(scratch)}
    proc = subprocess.Popen([sys.executable, str(REPO / "experiments" / "readme_commands.py")], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout.readline().startswith("making RUN")
    deadline = time.monotonic() + 30
    while not (training := _processes_naming(f"hydra.run.dir={scratch}")) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert training, "the training that makes RUN did not start"
    for _ in range(8):  # a user pressing Ctrl-C again while the first one is being handled
        proc.send_signal(signal.SIGINT)
        time.sleep(0.03)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "Traceback" not in err and err.strip().splitlines()[-1].startswith("stopped by SIGINT"), err
    assert list(scratch.iterdir()) == []
    assert _gone(training)


def test_a_shown_output_line_is_found_across_padded_columns_and_other_runs_ids() -> None:
    printed = "job       status    pareto  val/acc\n1_8a88c9  finished  yes     0.1484\nexported cnn to m.pt2\n"
    assert readme_commands.shows_line("job  status    pareto  val/acc", printed)  # padded to other widths
    assert readme_commands.shows_line("0_93c2f4  finished  yes     0.2134", printed)  # another trial's id
    assert readme_commands.shows_line("exported cnn to outputs/deploy/last.pt2", printed)
    assert not readme_commands.shows_line("exported mlp to m.pt2", printed)
    assert not readme_commands.shows_line("job  failed", printed)

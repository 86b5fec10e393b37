"""Run every `python -m modelforge` command of README.md as written, so that a README edit cannot rot silently.

    MODELFORGE_DATA=/path/to/mnist python experiments/readme_commands.py [--only TEXT] [--keep]

Commands are taken from README.md's fenced code blocks (`\\` continuations joined) and run in README order, as
real processes, from one fresh temporary directory that stands for where the user stands. The things the README
names but does not make (RUN, my_digits/, scans/*.jpg, my_idx_folder, the user project under configs/ and
my_blocks/) are made first, from what the README itself says: see PLACEHOLDERS. Trainings are shortened with
`trainer.limit_*_batches=2` and searches to two trials (SHORTENING; each shortened command says so). A command
shown as `$ python -m modelforge ...` followed by `error: ...` must exit 2 and print those lines; every other
command must exit 0, a `# Total params: N` comment must be in what it prints, and so must the first two words of
each `# ...` output line the README shows under it. Commands this machine cannot
run are listed as skipped with the reason (SKIPS), never dropped. Exit status: 0 when every command agrees.
"""

from __future__ import annotations

import argparse
import gzip
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
FASHION_MNIST = Path("/usr/share/datasets/fashion-mnist")


@dataclass
class Command:
    """One command of the README: its text as written, where it is, and what the README says it prints."""

    line: int
    text: str
    error_lines: list[str] = field(default_factory=list)  # the README's `error:` line and its details, if any
    shown: list[str] = field(default_factory=list)  # `# ...` lines under it: what it prints, figures aside

    @property
    def argv(self) -> list[str]:
        return shlex.split(self.text, comments=True)

    @property
    def expected_exit(self) -> int:
        return 2 if self.error_lines else 0

    @property
    def comment(self) -> str:
        """The README's comment after the command (`  # Total params: ...`), '' when none."""
        match = re.search(r"\s#\s*(.*)$", self.text)
        return match.group(1) if match else ""


def extract(readme: Path = README) -> list[Command]:
    """Every modelforge command (and torchrun/srun launch of one) in the README's fenced code blocks."""
    commands: list[Command] = []
    lines = readme.read_text().splitlines()
    inside = False
    index = 0
    while index < len(lines):
        raw = lines[index]
        if raw.startswith("```"):
            inside = not inside
            index += 1
            continue
        if not inside:
            index += 1
            continue
        start = index
        text = raw.strip()
        while text.endswith("\\") and index + 1 < len(lines):  # a continued command is one command
            index += 1
            text = text[:-1].rstrip() + " " + lines[index].strip()
        index += 1
        prompt = text.startswith("$ ")
        text = text[2:] if prompt else text
        if "<command>" in text or not re.match(r"(python -m modelforge|torchrun|srun) ", text):
            continue
        command = Command(line=start + 1, text=text)
        if prompt:  # the printed lines follow, up to a blank line or the block's end
            shown = []
            while index < len(lines) and lines[index].strip() and not lines[index].startswith(("```", "$ ")):
                shown.append(lines[index].rstrip())
                index += 1
            if shown and shown[0].startswith("error:"):
                command.error_lines = [line for line in shown if "..." not in line]
        else:
            while index < len(lines) and lines[index].startswith("# "):
                command.shown.append(lines[index][2:].strip())
                index += 1
        commands.append(command)
    return commands


# Commands this machine cannot run, by a pattern of their text, with the reason printed beside them.
def skip_reason(command: Command) -> str | None:
    text = command.text
    if text.startswith("srun"):
        return None if shutil.which("srun") else "needs a Slurm cluster (no srun here)"
    if "--nnodes=2" in text:
        return "needs two machines (NODE0 and a rendezvous)"
    if "data=fashion_mnist" in text and not FASHION_MNIST.is_dir():
        return f"Fashion-MNIST is not installed ({FASHION_MNIST}: apt-get install dataset-fashion-mnist)"
    return None


# Trainings run in seconds: these values replace or join a training command's own (the README's values stay
# everywhere else). A command that sets fast_dev_run already runs one batch of each stage.
SHORTENING = {
    "trainer.limit_train_batches": "2",
    "trainer.limit_val_batches": "2",
    "trainer.limit_test_batches": "2",
    "hydra.sweeper.n_trials": "2",
}


def shortened(argv: list[str]) -> tuple[list[str], list[str]]:
    """The argv with SHORTENING applied to a training (train, or a launcher of one), and what was changed."""
    if "train" not in argv or any(arg.startswith("trainer.fast_dev_run=") for arg in argv):
        return argv, []
    changes = []
    out = list(argv)
    for key, value in SHORTENING.items():
        if key == "hydra.sweeper.n_trials" and not any(arg.startswith("hparams_search=") for arg in argv):
            continue
        setting = f"{key}={value}"
        present = [i for i, arg in enumerate(out) if arg.startswith(key + "=")]
        if present:
            if out[present[0]] != setting:
                changes.append(f"{out[present[0]]} -> {value}")
                out[present[0]] = setting
        else:
            changes.append(setting)
            out.append(setting)
    return out, changes


# --- the placeholders: what the README names but leaves to the user, made here from what the README says ---

def _mnist_images(count: int) -> list:
    """The first `count` MNIST test images, as PIL images."""
    from PIL import Image

    with gzip.open(_data_dir() / "t10k-images-idx3-ubyte.gz") as f:
        data = f.read()
    size = 28 * 28
    return [Image.frombytes("L", (28, 28), data[16 + i * size:16 + (i + 1) * size]) for i in range(count)]


def _data_dir() -> Path:
    return Path(os.environ["MODELFORGE_DATA"])


class PlaceholderError(Exception):
    """What the README leaves to the user could not be made: the commands would fail for that reason, not theirs."""


def make_run(work: Path) -> None:
    """RUN: a run directory of the README's main job (shortened), named RUN where the user stands."""
    argv = [sys.executable, "-m", "modelforge", "train", "model=cnn", "enc_sizes=[32,64]",
            *(f"{key}={value}" for key, value in SHORTENING.items() if key.startswith("trainer.")),
            f"hydra.run.dir={work / 'RUN'}"]
    done = run_process(argv, cwd=work)
    if done.returncode != 0:
        raise PlaceholderError(f"the training that makes RUN exited {done.returncode}: "
                               f"{(done.stderr.strip().splitlines() or [''])[-1]}")


def make_digits(work: Path) -> None:
    """my_digits/: ten MNIST test images as PNG files."""
    (work / "my_digits").mkdir()
    for i, image in enumerate(_mnist_images(10)):
        image.save(work / "my_digits" / f"digit_{i}.png")


def make_scans(work: Path) -> None:
    """scans/*.jpg: five MNIST test images as JPEG files."""
    (work / "scans").mkdir()
    for i, image in enumerate(_mnist_images(5)):
        image.save(work / "scans" / f"scan_{i}.jpg", quality=95)


def make_idx_folder(work: Path) -> None:
    """my_idx_folder: a folder of the four IDX files with the standard names (real MNIST's)."""
    (work / "my_idx_folder").mkdir()
    for path in _data_dir().glob("*-ubyte.gz"):
        (work / "my_idx_folder" / path.name).symlink_to(path)


def make_user_project(work: Path) -> None:
    """configs/ and my_blocks/: the files README "Your own models and configs" shows, then `pip install ./my_blocks`.

    The install goes into a folder put on PYTHONPATH (see environment()) rather than into this environment, so
    running the README leaves the environment as it was; entry points are found there the same way.
    """
    for relative, text in readme_files().items():
        path = work / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    done = run_process([sys.executable, "-m", "pip", "install", "--quiet", "--no-build-isolation", "--no-deps",
                        "--target", str(work / ".user_site"), str(work / "my_blocks")])
    if done.returncode != 0:
        raise PlaceholderError(f"pip install ./my_blocks exited {done.returncode}: "
                               f"{(done.stderr.strip().splitlines() or [''])[-1]}")


def readme_files() -> dict[str, str]:
    """The user project's files: each fenced block whose introducing paragraph names its path (and ends in ':')."""
    files = {}
    paragraph: list[str] = []  # the last paragraph of prose, kept over the blank line before a block
    body: list[str] | None = None  # inside a fenced block
    blank = True
    for line in README.read_text().splitlines():
        if body is None and line.startswith("```"):
            intro = " ".join(paragraph)
            named = re.search(r"`((?:configs|my_blocks)/[\w/.]+)`", intro)
            body, paragraph = [], []
            path = named.group(1) if named and intro.rstrip().endswith(":") else None
        elif body is not None and line.startswith("```"):
            if path:
                files[path] = "\n".join(body) + "\n"
            body = None
        elif body is not None:
            body.append(line)
        elif line.strip():
            paragraph = [line] if blank else paragraph + [line]
        blank = not line.strip()
    return files


# Each placeholder, the pattern that finds it in a command, and how it is made (before the first command runs).
PLACEHOLDERS: dict[str, tuple[str, Callable[[Path], None]]] = {
    "RUN": (r"(?<![\w/])RUN\b", make_run),
    "my_digits/": (r"\bmy_digits/", make_digits),
    "scans/*.jpg": (r"\bscans/", make_scans),
    "my_idx_folder": (r"\bmy_idx_folder\b", make_idx_folder),
    "configs/ and my_blocks/": (r"\bconfigs\b|\bmy_blocks\b", make_user_project),
}

# Paths the README's commands make themselves and later commands read (hydra.run.dir=runs/mnist, ...).
MADE_BY_COMMANDS = ("runs/mnist",)

# Keys whose values are paths a command reads, for the check that each is a placeholder or made earlier.
READ_PATH_KEYS = ("ckpt_path=", "inputs=", "data.data_dir=", "init.from=", "--config-dir")


def paths_read(command: Command) -> list[str]:
    """The relative paths a command reads (not its outputs), as written."""
    argv = command.argv
    paths = []
    for i, arg in enumerate(argv):
        for key in READ_PATH_KEYS:
            if arg == key and i + 1 < len(argv):
                paths.append(argv[i + 1])
            elif arg.startswith(key) and key.endswith("="):
                paths.append(arg[len(key):])
        if arg.startswith("model=") and arg.endswith(".yaml"):
            paths.append(arg[len("model="):])
    return [path for path in paths if not path.startswith(("$", "/"))]


def placeholder_of(path: str) -> str | None:
    """The placeholder (or earlier command) that makes `path`, None when nothing does."""
    for name, (pattern, _) in PLACEHOLDERS.items():
        if re.match(pattern, path):
            return name
    for made in MADE_BY_COMMANDS:
        if path == made or path.startswith(made + "/"):
            return made
    return None


def plugin_install_line(readme: Path = README) -> int:
    """The README line of `pip install ./my_blocks`: the user's plugin is installed for the commands after it."""
    lines = readme.read_text().splitlines()
    return next(i + 1 for i, line in enumerate(lines) if line.strip().startswith("pip install ./my_blocks"))


def environment(work: Path, command: Command | None = None) -> dict[str, str]:
    """The user's environment for a command: the plugin installed only from the README's `pip install` on."""
    env = dict(os.environ)
    if command is None or command.line > plugin_install_line():
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(work / ".user_site"), env.get("PYTHONPATH")]))
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return env


def resolved(argv: list[str], env: dict[str, str]) -> list[str]:
    """argv as bash would run it here: `$VAR` expanded, `python` this interpreter, torchrun torch's own."""
    argv = [re.sub(r"\$(\w+)", lambda m: env.get(m.group(1), m.group(0)), arg) for arg in argv]
    if argv[0] == "python":
        argv[0] = sys.executable
    elif argv[0] == "torchrun":
        argv = [sys.executable, "-m", "torch.distributed.run", *argv[1:]]
    return argv


@dataclass
class Outcome:
    command: Command
    got: int | None  # None: skipped
    seconds: float = 0.0
    note: str = ""

    @property
    def agrees(self) -> bool:
        return self.got is None or (self.got == self.command.expected_exit and not self.note.startswith("but"))


class Stopped(Exception):
    """SIGTERM or SIGINT reached the script: the running command's process group is killed on the way out."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _stop(signum: int, _frame: object) -> None:
    raise Stopped(signum)


def run_process(argv: list[str], timeout: float | None = None, **options: object) -> subprocess.CompletedProcess:
    """subprocess.run in a process group of its own, killed whole (a sweep's jobs, torchrun's ranks) on a timeout or
    when the script is stopped, so that nothing it started outlives it."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
                            start_new_session=True, **options)
    try:
        out, err = proc.communicate(timeout=timeout)
    except BaseException:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


def run_one(command: Command, work: Path, env: dict[str, str], timeout: float) -> Outcome:
    reason = skip_reason(command)
    if reason:
        return Outcome(command, None, note=f"skipped: {reason}")
    argv, changes = shortened(command.argv) if not command.error_lines else (command.argv, [])
    start = time.perf_counter()
    try:
        done = run_process(resolved(argv, env), timeout, cwd=work, env=env)
    except subprocess.TimeoutExpired:
        return Outcome(command, -1, time.perf_counter() - start, f"but ran past {timeout:.0f} s")
    seconds = time.perf_counter() - start
    note = f"shortened: {', '.join(changes)}" if changes else ""
    missing = [line for line in command.error_lines if line.strip() not in done.stderr]
    params = re.search(r"Total params: [\d,]+", command.comment)
    # a shown line's first two words: its figures and paths differ from run to run
    unshown = [line for line in command.shown if " ".join(line.split()[:2]) not in done.stdout + done.stderr]
    if missing:
        note = f"but the README's line {missing[0].strip()!r} is not in what it printed"
    elif unshown:
        note = f"but the README's output line {unshown[0]!r} does not start a line it printed"
    elif params and params.group(0) not in done.stdout:
        note = f"but {params.group(0)!r} (the README's comment) is not in what it printed"
    if done.returncode != command.expected_exit or note.startswith("but"):
        tail = (done.stderr.strip() or done.stdout.strip()).splitlines()[-6:]
        note = "; ".join(filter(None, [note, " | ".join(tail)]))
    return Outcome(command, done.returncode, seconds, note)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", help="run only the commands whose text contains this (placeholders still made)")
    parser.add_argument("--keep", action="store_true", help="keep the working directory and print its path")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds one command may take")
    args = parser.parse_args()
    if "MODELFORGE_DATA" not in os.environ and not (REPO.parent / "shared" / "datasets" / "mnist").is_dir():
        print("error: set MODELFORGE_DATA to a folder with real MNIST (the README's commands train on it)",
              file=sys.stderr)
        return 2
    commands = [c for c in extract() if not args.only or args.only in c.text]
    work = Path(tempfile.mkdtemp(prefix="readme_commands_"))
    os.environ.setdefault("MODELFORGE_DATA", str(REPO.parent / "shared" / "datasets" / "mnist"))
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, _stop)
    outcomes: list[Outcome] = []
    try:
        for name, (_, make) in PLACEHOLDERS.items():  # all of them: some commands need one they do not name
            print(f"making {make.__doc__.splitlines()[0]}", flush=True)
            make(work)
        for command in commands:
            outcome = run_one(command, work, environment(work, command), args.timeout)
            outcomes.append(outcome)
            got = "skip" if outcome.got is None else str(outcome.got)
            mark = "ok " if outcome.agrees else "BAD"
            print(f"{mark} README:{command.line:<5} expected {command.expected_exit} got {got:<4} "
                  f"{outcome.seconds:6.1f} s  {command.text}" + (f"\n      {outcome.note}" if outcome.note else ""),
                  flush=True)
    except Stopped as stop:
        print(f"\nstopped by {stop}: the running command was killed; {len(outcomes)} of {len(commands)} commands ran",
              file=sys.stderr)
        return 128 + stop.signum
    except PlaceholderError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    finally:
        if args.keep:
            print(f"working directory kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    bad = [o for o in outcomes if not o.agrees]
    skipped = sum(o.got is None for o in outcomes)
    print(f"\n{len(outcomes)} commands: {len(outcomes) - len(bad) - skipped} as the README says, {skipped} skipped, "
          f"{len(bad)} not as the README says")
    return 1 if bad else 0

if __name__ == "__main__":
    sys.exit(main())

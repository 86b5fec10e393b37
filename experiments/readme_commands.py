"""Run every command and Python block of the README and the documentation's pages as written, so that no page rots.

    MODELFORGE_DATA=/path/to/mnist python experiments/readme_commands.py [--only TEXT] [--keep]

The pages are README.md and docs/*.md, in the order of the site's table of contents. Their fenced blocks are read by
language, and run in page order as real processes, from one fresh temporary directory that stands for where the
user stands:

- ``bash``: each line (``\\`` continuations joined) is a command. ``python -m modelforge``, ``torchrun`` and ``srun``
  commands run; every other line must be one that NOT_RUN knows, and is listed with its reason.
- ``console``: a transcript, ``$ command`` and what it printed. A transcript that shows an ``error:`` line must
  exit 2 (or the ``(exit N)`` its note shows) and print that line and the indented lines under it, ``...``
  standing for any text; its other lines must start lines it printed (their first two words). A sweep whose
  command ends in ``# SIGTERM once job N trains`` gets that signal once job N saved its first epoch. A transcript whose
  set-up this script cannot make (a signal at a chosen moment, a full disk: SET_UPS) is listed with its reason;
  the test named beside it on the page makes it.
- ``python``: the block runs as a script and must exit 0; the first word of a ``print(...)  # comment`` must be in
  what it prints.

The things the pages name but do not make (RUN, my_digits/, scans/*.jpg, my_idx_folder, my_pictures/, the user
project under configs/ and my_blocks/, the model files of docs/errors.md, its damaged and hostile files under
bad/) are made first, from what the pages say: see PLACEHOLDERS. Trainings are shortened to
``trainer.limit_*_batches=2`` and searches to two trials (SHORTENING; each shortened command says so). A command
must exit 0 unless it shows an ``error:``; a ``# Total params: N`` comment must be in what it prints, and so must
the first two words of each ``# ...`` output line shown under it. The included records of experiments/ are not
run: their commands are the full trainings that were measured. Exit status: 0 when every command agrees, 1 when
one does not, 2 for bad input, 128 + the signal when stopped (the running command's processes are killed).
"""

from __future__ import annotations

import argparse
import ctypes
import gzip
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from page_commands import (  # noqa: E402 - a sibling file, not a package; re-exported for the tests
    NOT_RUN,
    REPO,
    Command,
    extract,
    fenced_blocks,
    matches,
    not_run_reason,
    pages,
    paths_read,
    paths_written,
    project_files,
    unknown,
)

FASHION_MNIST = Path("/usr/share/datasets/fashion-mnist")
__all__ = ["NOT_RUN", "REPO", "Command", "extract", "fenced_blocks", "matches", "not_run_reason", "pages",
           "paths_read", "paths_written", "project_files", "unknown"]


# Commands this machine cannot run, by a pattern of their text, with the reason printed beside them.
def skip_reason(command: Command) -> str | None:
    text = command.text
    if text.startswith("srun"):
        return None if shutil.which("srun") else "needs a Slurm cluster (no srun here)"
    if "--nnodes=2" in text:
        return "needs two machines (NODE0 and a rendezvous)"
    if ("data=fashion_mnist" in text or "finetune_image_folder/make_folder" in text) and not FASHION_MNIST.is_dir():
        return f"Fashion-MNIST is not installed ({FASHION_MNIST}: apt-get install dataset-fashion-mnist)"
    if "init.from=torchvision:" in text and command.kind != "transcript":
        return "needs the internet (torchvision's weights from download.pytorch.org) or the file in torch.hub's cache"
    return None


# Trainings run in seconds: these values replace or join a training command's own (the pages' values stay
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
            given = out[present[0]].split("=", 1)[1]
            if given.isdigit() and int(given) <= int(value):  # the page's own value is already as short
                continue
            if out[present[0]] != setting:
                changes.append(f"{out[present[0]]} -> {value}")
                out[present[0]] = setting
        else:
            changes.append(setting)
            out.append(setting)
    return out, changes


def shortened_python(code: str) -> tuple[str, list[str]]:
    """A Python block that composes a training config gets SHORTENING's trainer limits first in its overrides."""
    match = re.search(r"compose\(\s*\"train\",\s*overrides=\[", code)
    if not match:
        return code, []
    limits = [f"{key}={value}" for key, value in SHORTENING.items() if key.startswith("trainer.")]
    return code[:match.end()] + "".join(f'"{limit}", ' for limit in limits) + code[match.end():], limits


# --- the placeholders: what the pages name but leave to the user, made here from what the pages say ---

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
    """What the pages leave to the user could not be made: the commands would fail for that reason, not theirs."""


def make_run(work: Path) -> None:
    """RUN: a run directory of the main job (shortened), named RUN where the user stands."""
    argv = [sys.executable, "-m", "modelforge", "train",
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


def make_pictures(work: Path) -> None:
    """my_pictures/: a folder of class folders of images (ImageFolder's layout), 12 MNIST test digits per class."""
    names = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")
    with gzip.open(_data_dir() / "t10k-labels-idx1-ubyte.gz") as f:
        labels = f.read()[8:8 + 400]
    taken = dict.fromkeys(range(10), 0)
    for i, image in enumerate(_mnist_images(400)):
        if taken[labels[i]] < 12:
            folder = work / "my_pictures" / names[labels[i]]
            folder.mkdir(parents=True, exist_ok=True)
            image.save(folder / f"{i:04d}.png")
            taken[labels[i]] += 1


def make_bad_files(work: Path) -> None:
    """bad/: the damaged and hostile files of docs/errors.md (a payload writes bad/PWNED if it ever runs)."""
    import io
    import pickle

    import numpy as np
    import torch
    from PIL import Image

    sys.path.insert(0, str(REPO))
    from tests.helpers import payloads  # the attacker's files the tests make, made the same way here

    bad = work / "bad"
    (bad / "empty").mkdir(parents=True)
    (bad / "afile").write_text("a file, not a folder\n")
    marker = bad / "PWNED"
    last = (work / "RUN" / "checkpoints" / "last.ckpt").read_bytes()
    (bad / "trunc.ckpt").write_bytes(last[:300_000])
    (bad / "cut.pt2").write_bytes(last[:300_000])
    (bad / "model.onnx").write_bytes(last)
    (bad / "model.pt2").write_bytes(last)
    (bad / "notes.ckpt").write_text("not a checkpoint\n")
    (bad / "foreign.ckpt").write_bytes(pickle.dumps({"weights": [1.0, 2.0]}, protocol=4))
    torch.save({"weight": torch.zeros(2, 2)}, bad / "plain.ckpt")
    checkpoint = torch.load(io.BytesIO(last), weights_only=True)
    torch.save({**checkpoint, "payload": payloads.OpensMarker(marker)}, bad / "evil.ckpt")
    payloads.pt2_pickled_weight(bad / "evil.pt2", marker)
    (bad / "cut.onnx").write_bytes(b"\x08\x08\x12\x07pytorch" + last[:300_000 - 11])  # an ONNX model's first bytes
    digits = bad / "digits"
    digits.mkdir()
    _mnist_images(1)[0].save(digits / "seven.png")
    (digits / "notes.png").write_text("not an image\n")
    (digits / "empty.png").write_bytes(b"")
    Image.new("L", (10_000, 10_000)).save(bad / "big.png")
    stored = checkpoint["hyper_parameters"]["config"]  # a stored config that names a class for instantiate to build
    stored["trainer"]["precision"] = {"_target_": "builtins.open", "_args_": [str(marker), "w"]}
    torch.save(checkpoint, bad / "target.ckpt")
    odd = bad / "odd"  # files predict names and skips
    odd.mkdir()
    _mnist_images(1)[0].save(odd / "seven.png")
    pixels = np.full((28, 28), 100.0, dtype=np.float32)
    pixels[3, 4] = np.nan
    Image.fromarray(pixels, "F").save(odd / "nan.tif")
    os.symlink("gone.png", odd / "dangling.png")
    os.symlink("loop.png", odd / "loop.png")
    os.mkfifo(odd / "fifo.png")
    idx = bad / "trunc_idx"  # MNIST with its training images cut short
    idx.mkdir()
    for path in _data_dir().glob("*-ubyte.gz"):
        if not path.name.startswith("train-images"):
            (idx / path.name).symlink_to(path)
    with gzip.open(_data_dir() / "train-images-idx3-ubyte.gz") as f:
        (idx / "train-images-idx3-ubyte").write_bytes(f.read(5000))
    pictures = bad / "pictures"  # a class folder without images
    (pictures / "cat").mkdir(parents=True)
    (pictures / "dog").mkdir()
    for i, image in enumerate(_mnist_images(2)):
        image.save(pictures / "cat" / f"{i}.png")
    (pictures / "cat" / "notes.txt").write_text("not an image\n")
    (pictures / "dog" / "readme.txt").write_text("no pictures yet\n")


def make_user_project(work: Path) -> None:
    """configs/ and my_blocks/: the files of "Your own project", then `pip install ./my_blocks`.

    The install goes into a folder put on PYTHONPATH (see environment()) rather than into this environment, so
    running the pages leaves the environment as it was; entry points are found there the same way.
    """
    for relative, text in project_files().items():
        path = work / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    done = run_process([sys.executable, "-m", "pip", "install", "--quiet", "--no-build-isolation", "--no-deps",
                        "--target", str(work / ".user_site"), str(work / "my_blocks")])
    if done.returncode != 0:
        raise PlaceholderError(f"pip install ./my_blocks exited {done.returncode}: "
                               f"{(done.stderr.strip().splitlines() or [''])[-1]}")


# Each placeholder, the pattern that finds it in a command, and how it is made (before the first command runs).
PLACEHOLDERS: dict[str, tuple[str, Callable[[Path], None]]] = {
    "RUN": (r"(?<![\w/])RUN\b", make_run),
    "my_digits/": (r"\bmy_digits/", make_digits),
    "scans/*.jpg": (r"\bscans/", make_scans),
    "my_idx_folder": (r"\bmy_idx_folder\b", make_idx_folder),
    "my_pictures/": (r"\bmy_pictures\b", make_pictures),
    "configs/ and my_blocks/": (r"\bconfigs\b|\bmy_blocks\b|\bmodel/\w+\.yaml", make_user_project),
    "bad/": (r"\bbad/", make_bad_files),
}

# Paths the pages' commands make themselves and later commands read (hydra.run.dir=outputs/runs/mnist, ...).
MADE_BY_COMMANDS = ("outputs/quickstart", "outputs/runs/mnist", "outputs/runs/frozen", "outputs/runs/pictures",
                    "outputs/fashion_pngs", "outputs/runs/segment",
                    "outputs/resnet18-random.pth", "outputs/mnist.safetensors")

def placeholder_of(path: str) -> str | None:
    """The placeholder (or earlier command) that makes `path`, None when nothing does."""
    for name, (pattern, _) in PLACEHOLDERS.items():
        if re.match(pattern, path):
            return name
    for made in MADE_BY_COMMANDS:
        if path == made or path.startswith(made + "/"):
            return made
    return None


def plugin_installed_after(commands: list[Command]) -> int:
    """The index in `commands` of `pip install ./my_blocks`: the user's plugin is installed for those after it."""
    return next(i for i, c in enumerate(commands) if c.text.startswith("pip install ./my_blocks"))


def environment(work: Path, with_plugin: bool) -> dict[str, str]:
    """The user's environment for a command: the plugin installed only from the pages' `pip install` on."""
    env = dict(os.environ)
    if with_plugin:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(work / ".user_site"), env.get("PYTHONPATH")]))
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return env


def resolved(argv: list[str], env: dict[str, str]) -> list[str]:
    """argv as bash would run it here: `$VAR` expanded, `python` this interpreter, torchrun torch's own."""
    argv = [re.sub(r"\$(\w+)", lambda m: env.get(m.group(1), m.group(0)), arg) for arg in argv]
    if argv[0] == "python":
        argv[0] = sys.executable
        if len(argv) > 1 and argv[1].startswith("experiments/"):  # a script of the checkout, run from the user's folder
            argv[1] = str(REPO / argv[1])
    elif argv[0] == "torchrun":
        argv = [sys.executable, "-m", "torch.distributed.run", *argv[1:]]
    return argv


@dataclass
class Outcome:
    command: Command
    got: int | None  # None: not run (skipped, or not a command this script runs)
    seconds: float = 0.0
    note: str = ""

    @property
    def agrees(self) -> bool:
        return self.got is None or (self.got == self.command.expected_exit and not self.note.startswith("but"))


# --- processes: each command in a process group of its own, which never outlives this script ---

class Stopped(Exception):
    """SIGTERM or SIGINT reached the script: the running command's process group is killed on the way out."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _stop(signum: int, _frame: object) -> None:
    # The first signal stops the script; any later one (Ctrl-C pressed again) is ignored, so that the clean-up it
    # started (killing the command's processes, removing the working directory) runs once and to its end.
    for other in (signal.SIGTERM, signal.SIGINT):
        signal.signal(other, signal.SIG_IGN)
    raise Stopped(signum)


PR_SET_PDEATHSIG = 1  # <linux/prctl.h>

# The process between this script and a command: the leader of the command's process group. When this script
# dies, however it dies (a SIGKILL included), the kernel sends the guard SIGTERM (PR_SET_PDEATHSIG), and the guard
# kills the whole group: the command and whatever it started (a sweep's jobs, torchrun's ranks).
GUARD = """
import os, signal, subprocess, sys
def end(*_):
    os.killpg(0, signal.SIGKILL)
signal.signal(signal.SIGTERM, end)
if os.getppid() != int(sys.argv[1]):  # the script died before the guard could be told of it
    end()
code = subprocess.call(sys.argv[2:])
if code < 0:  # killed by a signal: die by the same one, so that the script sees what the command got
    signal.signal(-code, signal.SIG_DFL)
    os.kill(os.getpid(), -code)
sys.exit(code)
"""


def _die_with_parent() -> None:
    """In the guard's process, before it runs: SIGTERM when this script's process ends (Linux)."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


def run_process(argv: list[str], timeout: float | None = None, stdin: str | None = None,
                stop_when: Path | None = None, **options: object) -> subprocess.CompletedProcess:
    """subprocess.run in a process group of its own, led by GUARD: the group is killed whole on a timeout, when the
    script is stopped, and when the script dies. ``stop_when``: a sweep job's directory; once its first epoch is
    saved, SIGTERM goes to the process that claimed it (as ``kill`` would, or a cluster's time limit)."""
    guarded = [sys.executable, "-c", GUARD, str(os.getpid()), *argv]
    proc = subprocess.Popen(guarded, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL, text=True,
                            start_new_session=True, preexec_fn=_die_with_parent, **options)
    if stop_when is not None:  # beside communicate(), which keeps reading the pipes meanwhile
        threading.Thread(target=_terminate_once_training, args=(proc, stop_when), daemon=True).start()
    try:
        out, err = proc.communicate(stdin, timeout=timeout)
    except BaseException:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.communicate()
        raise
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


def _terminate_once_training(proc: subprocess.Popen, job_dir: Path) -> None:
    while proc.poll() is None and not (job_dir / "checkpoints" / "last.ckpt").is_file():
        time.sleep(0.05)
    if proc.poll() is None:
        os.kill(json.loads((job_dir / ".run_claim").read_text())["pid"], signal.SIGTERM)


def stopped_job(command: Command, work: Path) -> Path | None:
    """The job directory of a sweep the page stops by a signal: ``# SIGTERM once job N trains`` after the command."""
    match = re.search(r"SIGTERM once job (\d+) trains", command.comment)
    sweep_dir = next((a.split("=", 1)[1] for a in command.argv if a.startswith("hydra.sweep.dir=")), None)
    return work / sweep_dir / match.group(1) if match and sweep_dir else None


# --- running the pages ---

def run_one(command: Command, work: Path, env: dict[str, str], timeout: float) -> Outcome:
    reason = not_run_reason(command) or skip_reason(command)
    if reason:
        return Outcome(command, None, note=f"not run: {reason}")
    if command.text.startswith("pip install ./my_blocks"):
        return Outcome(command, 0, note="made with the user project (into a folder on PYTHONPATH)")
    code, changes = None, []
    if command.kind == "python":
        code, changes = shortened_python(command.text)
        argv = [sys.executable, "-"]
    else:
        argv, changes = shortened(command.argv) if not command.error_lines else (command.argv, [])
        argv = resolved(argv, env)
    start = time.perf_counter()
    try:
        done = run_process(argv, timeout, stdin=code, stop_when=stopped_job(command, work), cwd=work, env=env)
    except subprocess.TimeoutExpired:
        return Outcome(command, -1, time.perf_counter() - start, f"but ran past {timeout:.0f} s")
    seconds = time.perf_counter() - start
    note = f"shortened: {', '.join(changes)}" if changes else ""
    printed_all = done.stdout + done.stderr
    missing = [line for line in command.error_lines if not matches(line, printed_all)]
    params = re.search(r"Total params: [\d,]+", command.comment)
    unshown = [line for line in command.shown if not shows_line(line, printed_all)]
    printed = [word for word in printed_words(command) if word not in done.stdout]
    if missing:
        note = f"but the page's line {missing[0].strip()!r} is not in what it printed"
    elif unshown:
        note = f"but the page's output line {unshown[0]!r} does not start a line it printed"
    elif params and params.group(0) not in done.stdout:
        note = f"but {params.group(0)!r} (the page's comment) is not in what it printed"
    elif printed:
        note = f"but {printed[0]!r} (the page's comment on a print) is not in what it printed"
    if done.returncode != command.expected_exit or note.startswith("but"):
        tail = (done.stderr.strip() or done.stdout.strip()).splitlines()[-6:]
        note = "; ".join(filter(None, [note, " | ".join(tail)]))
    return Outcome(command, done.returncode, seconds, note)


def shows_line(line: str, printed: str) -> bool:
    """``printed`` holds a page's output ``line`` as far as a run can repeat it: its first two words (its figures
    and paths differ from run to run), however far apart (a table's columns are padded to the widest cell)."""
    return re.search(r"\s+".join(map(_loose_word, line.split()[:2])), printed) is not None


def _loose_word(word: str) -> str:
    """A pattern for a word of a page's output in which numbers and hex ids (a sweep job's ``3_8d4136``) stand for
    any: they differ from run to run, and a shortened search runs fewer trials than the page shows."""
    parts = re.split(r"([0-9a-f]{6,}|\d+)", word)
    return "".join(r"[0-9a-f]+" if re.fullmatch(r"[0-9a-f]{6,}", part) else r"\d+" if part.isdigit()
                   else re.escape(part) for part in parts if part)


def printed_words(command: Command) -> list[str]:
    """In a Python block, the first word of each `print(...)  # comment`: what the page says it prints."""
    if command.kind != "python":
        return []
    return [m.group(1).rstrip(":,") for m in re.finditer(r"^print\(.*\)\s+#\s*(\S+)", command.text, re.M)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", help="run only the commands whose text contains this (placeholders still made)")
    parser.add_argument("--page", help="run only the commands of this page (docs/errors.md; placeholders still made)")
    parser.add_argument("--keep", action="store_true", help="keep the working directory and print its path")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds one command may take")
    args = parser.parse_args()
    if "MODELFORGE_DATA" not in os.environ:
        print("error: set MODELFORGE_DATA to a folder with real MNIST (the pages' commands train on it)",
              file=sys.stderr)
        return 2
    commands = extract()
    plugin_at = plugin_installed_after(commands)
    chosen = [(i, c) for i, c in enumerate(commands)
              if (not args.only or args.only in c.text) and (not args.page or c.page == args.page)]
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, _stop)
    outcomes: list[Outcome] = []
    work: Path | None = None
    try:
        work = Path(tempfile.mkdtemp(prefix="readme_commands_"))
        for _, make in PLACEHOLDERS.values():  # all of them: some commands need one they do not name
            print(f"making {make.__doc__.splitlines()[0]}", flush=True)
            make(work)
        for index, command in chosen:
            outcome = run_one(command, work, environment(work, index > plugin_at), args.timeout)
            outcomes.append(outcome)
            got = "-" if outcome.got is None else str(outcome.got)
            mark = "-- " if outcome.got is None else "ok " if outcome.agrees else "BAD"
            first_line = command.text.strip().splitlines()[0] + (" ..." if command.kind == "python" else "")
            print(f"{mark} {command.where:<30} expected {command.expected_exit} got {got:<4} "
                  f"{outcome.seconds:6.1f} s  {first_line}" + (f"\n      {outcome.note}" if outcome.note else ""),
                  flush=True)
        if (work / "bad" / "PWNED").exists():  # a hostile file of docs/errors.md ran its payload
            print("BAD bad/PWNED exists: a command ran the code of a file it should have refused", flush=True)
            outcomes.append(Outcome(Command("docs/errors.md", 0, "bad/PWNED"), 1, note="but a payload ran"))
    except Stopped as stop:
        print(f"\nstopped by {stop}: the running command was killed and the working directory removed; "
              f"{len(outcomes)} of {len(chosen)} commands ran", file=sys.stderr)
        return 128 + stop.signum
    except PlaceholderError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    finally:
        for signum in (signal.SIGTERM, signal.SIGINT):  # nothing interrupts the clean-up
            signal.signal(signum, signal.SIG_IGN)
        if work is not None and args.keep:
            print(f"working directory kept: {work}")
        elif work is not None:
            shutil.rmtree(work, ignore_errors=True)
    bad = [o for o in outcomes if not o.agrees]
    not_run = sum(o.got is None for o in outcomes)
    print(f"\n{len(outcomes)} commands and blocks: {len(outcomes) - len(bad) - not_run} as the pages say, "
          f"{not_run} not run (each with its reason), {len(bad)} not as the pages say")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

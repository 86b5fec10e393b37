#!/usr/bin/env python3
"""Set up modelforge from a checkout and run it: the only commands a fresh machine needs.

    python3 run.py train [OVERRIDES ...]    the main job: train the default CNN on MNIST (python -m modelforge train)
    python3 run.py test [PYTEST ARGS ...]   the test suite (python -m pytest)
    python3 run.py docs                     serve the documentation while you edit it (sphinx-autobuild)
    python3 run.py COMMAND [ARGS ...]       any other modelforge command: eval, summary, export, predict, list
                                            (python -m modelforge COMMAND ARGS ...)

On first use it creates the virtual environment .venv (and says how to activate it, for running
`python -m modelforge ...` in a shell of your own), installs PyTorch for this machine (the CUDA build where
nvidia-smi works, else the CPU build; a torch already in the environment is left alone), then the project
(editable) with what the command needs, and runs the command in it. Later calls install again only when
pyproject.toml changed or the command needs more (`test` needs the test extras, `docs` Sphinx).

Environment variables:
    MODELFORGE_DATA    a folder holding MNIST's four files, for a machine without internet (else they are
                       downloaded once to ~/.cache/modelforge/mnist)
    MODELFORGE_TORCH   pip arguments for torch instead of the guess, e.g. 'torch==2.13.0' or
                       'torch --index-url https://download.pytorch.org/whl/cu128'
    MODELFORGE_VENV    the environment's folder (default: .venv in the checkout)

Only the Python standard library runs here, so the script works before anything is installed.
"""

from __future__ import annotations

import difflib
import hashlib
import importlib.util
import json
import os
import platform
import shlex
import shutil
import subprocess
import sys
import time
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent
CPU_INDEX = "https://download.pytorch.org/whl/cpu"
# what each command needs besides the project itself (its extras), and what it runs in the environment
COMMANDS = {
    "train": (("train",), ["-m", "modelforge", "train"]),
    "test": (("dev",), ["-m", "pytest"]),
    "docs": (("docs",), ["-m", "sphinx_autobuild", "docs", "docs/_build/html"]),
    # modelforge's other commands (modelforge/__main__.py's COMMANDS; tests/test_setup_script.py keeps them equal).
    # Each installs the training stack, summary and list too: the environment then runs every command of the pages.
    "eval": (("train",), ["-m", "modelforge", "eval"]),
    "summary": (("train",), ["-m", "modelforge", "summary"]),
    "export": (("train",), ["-m", "modelforge", "export"]),
    "predict": (("train",), ["-m", "modelforge", "predict"]),
    "list": (("train",), ["-m", "modelforge", "list"]),
    "diff": (("train",), ["-m", "modelforge", "diff"]),
}
IN_CHECKOUT = ("test", "docs")  # run in the checkout; the others where you stand (outputs/, your paths)
STAMP = ".modelforge-setup.json"  # in the environment: what was installed from which pyproject.toml


def say(message: str) -> None:
    print(f"[run.py] {message}", flush=True)


class SetupError(Exception):
    """A step of the set-up failed: one line saying which, and what to do."""


def active_environment() -> Path | None:
    """The virtual or conda environment this script runs in, when one is active: used as it is."""
    if sys.prefix != sys.base_prefix:
        return Path(sys.prefix)
    if os.environ.get("CONDA_PREFIX") == sys.prefix and os.environ.get("CONDA_DEFAULT_ENV", "base") != "base":
        return Path(sys.prefix)
    return None


def environment_dir() -> Path:
    """MODELFORGE_VENV, else the environment that is active, else .venv in the checkout."""
    chosen = os.environ.get("MODELFORGE_VENV")
    return Path(chosen).absolute() if chosen else active_environment() or ROOT / ".venv"


def python_of(env: Path) -> Path:
    return env / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def activation_line(env: Path) -> str:
    """The shell line that activates ``env``, so that `python -m modelforge ...` runs in it."""
    shown = os.path.relpath(env) if env.is_relative_to(Path.cwd()) else str(env)
    if os.name == "nt":
        return f"{shown}\\Scripts\\activate"
    return f". {shlex.quote(shown)}/bin/activate"


def make_environment(env: Path) -> Path:
    """The environment's interpreter, creating the environment first if there is none."""
    if env == active_environment():
        say(f"using the active environment {env}")
        return Path(sys.executable)
    python = python_of(env)
    if python.exists():
        return python
    # A torch this Python already has (a system or container install) is reused, not downloaded again.
    reuse = importlib.util.find_spec("torch") is not None
    say(f"creating the virtual environment {env}" + (" (with this Python's packages: its torch is kept)"
                                                     if reuse else ""))
    try:
        venv.EnvBuilder(with_pip=True, system_site_packages=reuse).create(env)
    except (subprocess.CalledProcessError, OSError) as exc:
        shutil.rmtree(env, ignore_errors=True)
        raise SetupError(f"could not create {env} ({exc}); on Debian/Ubuntu: apt-get install python3-venv") from None
    return python


def pip(python: Path, *args: str, quiet: bool = True) -> int:
    argv = [str(python), "-m", "pip", "install", *(["--quiet"] if quiet else []), *args]
    return subprocess.call(argv, cwd=ROOT)


def has_torch(python: Path) -> str | None:
    """The torch version the environment already has, None when it has none."""
    done = subprocess.run([str(python), "-c", "import torch; print(torch.__version__)"],
                          capture_output=True, text=True)
    return done.stdout.strip() if done.returncode == 0 else None


def has_cuda_gpu() -> bool:
    """nvidia-smi runs and lists a GPU: the machine can use a CUDA build of torch."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return False
    try:
        done = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0 and "GPU" in done.stdout


def torch_choices() -> list[tuple[str, list[str]]]:
    """The pip arguments to try for torch, in order, each with what it is."""
    chosen = os.environ.get("MODELFORGE_TORCH")
    if chosen:
        return [(f"MODELFORGE_TORCH={chosen}", shlex.split(chosen))]
    if has_cuda_gpu():
        if platform.system() == "Linux":
            return [("the CUDA build (nvidia-smi found a GPU)", ["torch"])]
        say("nvidia-smi found a GPU, but PyPI's torch for this system is a CPU build: for CUDA, set "
            "MODELFORGE_TORCH to the pip arguments pytorch.org gives")
        return [("PyPI's build", ["torch"])]
    if platform.system() != "Linux":  # PyPI's wheels for macOS and Windows are CPU builds already
        return [("PyPI's build (no CUDA GPU here)", ["torch"])]
    # On Linux a plain `torch` is a CUDA build of several GB: the CPU build comes from PyTorch's own index.
    return [("the CPU build (no nvidia-smi here)", ["torch", "--index-url", CPU_INDEX, "--timeout", "20",
                                                    "--retries", "1"]),
            ("PyPI's build, as the CPU index could not be reached (a CUDA build: it runs on a CPU, larger)",
             ["torch"])]


def install_torch(python: Path) -> None:
    present = has_torch(python)
    if present:
        say(f"torch {present} is installed in the environment: left as it is")
        return
    for what, args in torch_choices():
        say(f"installing torch: {what}")
        if pip(python, *args) == 0:
            return
    raise SetupError("torch could not be installed; set MODELFORGE_TORCH to the pip arguments for your machine "
                     "(pytorch.org lists them), e.g. MODELFORGE_TORCH='torch --index-url " + CPU_INDEX + "'")


def pyproject_digest() -> str:
    return hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()[:16]


def installed(env: Path) -> dict:
    try:
        return json.loads((env / STAMP).read_text())
    except (OSError, ValueError):
        return {}


def up_to_date(env: Path, extras: tuple[str, ...]) -> bool:
    """The environment holds this checkout's install of this pyproject.toml with ``extras`` (and so a torch)."""
    record = installed(env)
    return record.get("pyproject") == pyproject_digest() and record.get("root") == str(ROOT) \
        and set(extras) <= set(record.get("extras", []))


def install_project(python: Path, env: Path, extras: tuple[str, ...]) -> None:
    """The project, editable, with ``extras``; skipped when this pyproject.toml's install already has them."""
    if up_to_date(env, extras):
        return
    wanted = set(extras) | set(installed(env).get("extras", []))  # a new pyproject.toml keeps what was installed
    spec = "." + (f"[{','.join(sorted(wanted))}]" if wanted else "")
    say(f"installing modelforge from {ROOT} ({spec}, editable)")
    if pip(python, "--upgrade", "pip") != 0 or pip(python, "-e", spec) != 0:
        raise SetupError(f"pip could not install {spec}: its own message is above")
    if "dev" in wanted:
        install_torchvision_beside(python, env)
    (env / STAMP).write_text(json.dumps({"pyproject": pyproject_digest(), "root": str(ROOT),
                                         "extras": sorted(wanted)}) + "\n")


def install_torchvision_beside(python: Path, env: Path) -> None:
    """torchvision of the installed torch's release, for the zoo's parity tests only: in a folder beside the
    environment that only those tests put on sys.path (its PyPI wheel, a CUDA build, would break
    `import pytorch_lightning` beside a CPU torch). Without it the parity tests skip, saying why."""
    version = has_torch(python) or ""
    parts = version.split("+")[0].split(".")
    if len(parts) < 2 or parts[0] != "2" or not parts[1].isdigit():
        say(f"no torchvision for the parity tests: torch {version} has no known torchvision release")
        return
    release = f"torchvision~=0.{int(parts[1]) + 15}.0"  # torch 2.13 -> torchvision 0.28
    target = env / "torchvision-tests"
    if pip(python, "--no-deps", "--upgrade", "--target", str(target), release) != 0:
        say(f"could not install {release} for the zoo's parity tests: they will skip, saying why")


def unknown_command(name: str) -> str:
    """One line: the command is unknown, the closest known one, and all of them."""
    guess = difflib.get_close_matches(name, COMMANDS, n=1)
    hint = f" (did you mean {guess[0]!r}?)" if guess else ""
    return f"error: unknown command {name!r}{hint}; run.py's commands: {', '.join(COMMANDS)}"


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2 if not argv else 0
    if argv[0] not in COMMANDS:
        print(unknown_command(argv[0]), file=sys.stderr)
        return 2
    if sys.version_info < (3, 10):
        print(f"error: modelforge needs Python 3.10 or newer; this is {platform.python_version()}", file=sys.stderr)
        return 2
    extras, command = COMMANDS[argv[0]]
    env = environment_dir()
    created = not python_of(env).exists() and env != active_environment()
    try:
        python = make_environment(env)
        if not up_to_date(env, extras):  # else straight to the command: no import of torch to check it
            install_torch(python)
            install_project(python, env, extras)
    except SetupError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if created:  # once, with the environment: the README's other commands need it active in a new shell
        say(f"made {env}; to run `python -m modelforge ...` in a new shell, activate it first: "
            f"{activation_line(env)}  (or put `python3 run.py` before the command)")
    full = [str(python), *command, *argv[1:]]
    where = ROOT if argv[0] in IN_CHECKOUT else Path.cwd()
    if os.name == "nt":
        return subprocess.call(full, cwd=where)
    os.chdir(where)
    # the exec'd command keeps this process's start time: its set-up timing starts here, not before the installs
    os.environ["MODELFORGE_EXEC_AT"] = repr(time.time())
    os.execv(full[0], full)  # the command's own exit status, signals and terminal


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

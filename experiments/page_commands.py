"""The commands and code blocks of the README and the documentation's pages, read by the language of their fences.

experiments/readme_commands.py runs them; tests/test_readme_commands.py checks, without running them, that each is
known, composes and writes under outputs/. See readme_commands.py for what each kind of block means.
"""

from __future__ import annotations

import re
import shlex
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"


def pages() -> list[Path]:
    """README.md, then the site's pages in the order of docs/index.md's tables of contents, then any other."""
    listed = re.findall(r"^([\w/-]+)$", "\n".join(re.findall(r"```\{toctree\}(.*?)```", (DOCS / "index.md").read_text(),
                                                           re.S)), re.M)
    ordered = [DOCS / "index.md", *(DOCS / f"{name}.md" for name in listed)]
    rest = sorted(p for p in DOCS.glob("*.md") if p not in ordered)
    return [REPO / "README.md", *(p for p in ordered + rest if p.is_file() and "experiments" not in p.parts)]


@dataclass
class Command:
    """One command or Python block of a page: its text as written, where it is, and what the page says it prints."""

    page: str  # relative to the repository
    line: int
    text: str
    kind: str = "command"  # "command", "python" or "transcript" (a command shown with what it printed)
    error_lines: list[str] = field(default_factory=list)  # the page's `error:` line and its indented details
    shown: list[str] = field(default_factory=list)  # other lines it prints: `# ...` under a command, a transcript's
    exit_shown: int | None = None  # a transcript's `(exit N ...)` note

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"

    @property
    def argv(self) -> list[str]:
        return shlex.split(self.text, comments=True) if self.kind != "python" else [sys.executable, "-"]

    @property
    def expected_exit(self) -> int:
        if self.exit_shown is not None:
            return self.exit_shown
        return 2 if self.error_lines else 0

    @property
    def comment(self) -> str:
        """The page's comment after the command (`  # Total params: ...`), '' when none."""
        match = re.search(r"\s#\s*(.*)$", self.text) if self.kind != "python" else None
        return match.group(1) if match else ""

    @property
    def runs_modelforge(self) -> bool:
        """A command this script runs: modelforge's, a launcher's, a Python block, or one of RUN_SCRIPTS."""
        return self.kind == "python" or bool(re.match(r"(python -m modelforge|torchrun|srun) ", self.text)) or any(
            re.match(pattern, self.text) for pattern in RUN_SCRIPTS)


# Scripts of experiments/ that the pages' commands run as a user would, from the checkout (paths as written).
RUN_SCRIPTS = (r"python experiments/finetune_image_folder/make_(folder|weights)\.py ",)


def matches(expected: str, printed: str) -> bool:
    """`expected` (a line of a page, stripped) is in `printed`, where `...` in it stands for any text."""
    pattern = ".*?".join(re.escape(part) for part in expected.strip().split("..."))
    return re.search(pattern, printed) is not None


def fenced_blocks(page: Path) -> Iterator[tuple[str, int, list[str]]]:
    """(language, line of the block's first line, its lines) of every fenced block; directives (```{x}) too."""
    lines = page.read_text().splitlines()
    index = 0
    while index < len(lines):
        opening = re.match(r"^(`{3,})(.*)$", lines[index])
        if not opening:
            index += 1
            continue
        fence, language = opening.group(1), opening.group(2).strip()
        start = index + 1
        index += 1
        while index < len(lines) and lines[index].rstrip() != fence:
            index += 1
        yield language, start + 1, lines[start:index]
        index += 1


def extract(page_paths: list[Path] | None = None) -> list[Command]:
    """Every command, transcript and Python block of the pages, in order."""
    commands: list[Command] = []
    for page in page_paths or pages():
        name = page.relative_to(REPO).as_posix()
        for language, first, body in fenced_blocks(page):
            if language == "python":
                commands.append(Command(name, first, "\n".join(body) + "\n", kind="python"))
            elif language in ("bash", "sh", "shell", "console"):
                commands += _commands_of(name, first, body, transcript=language == "console")
    return commands


def _commands_of(page: str, first: int, body: list[str], transcript: bool) -> list[Command]:
    found: list[Command] = []
    index = 0
    while index < len(body):
        start, text = index, body[index].strip()
        while text.endswith("\\") and index + 1 < len(body):  # a continued command is one command
            index += 1
            text = text[:-1].rstrip() + " " + body[index].strip()
        index += 1
        if transcript and not text.startswith("$ "):
            continue  # printed output
        if not text or (text.startswith("#") and not transcript):
            continue  # a comment (#SBATCH lines included)
        command = Command(page, first + start, text[2:] if transcript else text,
                          kind="transcript" if transcript else "command")
        if transcript:  # the printed lines follow, up to a blank line or the next prompt
            shown = []
            while index < len(body) and body[index].strip() and not body[index].startswith("$ "):
                shown.append(body[index].rstrip())
                index += 1
            _read_transcript(command, shown)
        else:
            while index < len(body) and body[index].startswith("# "):
                command.shown.append(body[index][2:].strip())
                index += 1
        found.append(command)
    return found


def _read_transcript(command: Command, shown: list[str]) -> None:
    """What a transcript shows: its `error:` line with the indented lines under it (checked whole), the other
    printed lines (checked by their first two words), and a `(exit N ...)` note (the exit status)."""
    start = next((i for i, line in enumerate(shown) if line.startswith("error:")), None)
    if start is not None:
        end = start + 1
        while end < len(shown) and shown[end].startswith((" ", "\t")):
            end += 1
        command.error_lines = shown[start:end]
    notes = [line for line in shown if line.startswith("(")]
    exits = [int(m.group(1)) for line in notes if (m := re.match(r"\(exit (\d+)", line))]
    command.exit_shown = exits[0] if exits else None
    command.shown = [line.strip() for line in shown
                     if line not in command.error_lines and line not in notes and line.strip() != "..."]


# Commands of the pages that this script does not run, by a pattern of their text, and why. A command that is
# neither run nor listed here is unknown: tests/test_readme_commands.py fails on it.
NOT_RUN: list[tuple[str, str]] = [
    (r"(MODELFORGE_\w+=\S+ )*python3 run\.py \w+",
     "the set-up script: tests/test_setup_script.py runs it in a fresh clone (-m slow)"),
    (r"export MODELFORGE_DATA=", "sets the data folder: this script runs with MODELFORGE_DATA set"),
    (r"python3 -m venv ", "makes an environment: this script runs in one"),
    (r"\. \.venv/bin/activate", "activates the set-up script's environment: this script runs in one"),
    (r"pip install (?!\./my_blocks)", "installs into the environment: this script runs in one that has it all"),
    (r"sphinx-autobuild ", "serves the site until stopped: .ci/run builds it strictly"),
    (r"python -m sphinx ", "the strict build of the site: .ci/run runs it"),
    (r"python3? -m pytest\b", "the test suite"),
    (r"python experiments/readme_commands\.py\b", "this script"),
    (r"python experiments/make_figures\.py\b", "draws the pages' pictures from a real run (minutes)"),
    (r"python experiments/benchmarks/run\.py\b", "a benchmark: minutes to hours, on a quiet machine"),
    (r"python experiments/benchmarks/bench_\w+\.py\b", "a benchmark: minutes, on a quiet machine"),
    (r"apt-get install ", "installs a system package: this machine has it"),
    (r"timeout .*python -m modelforge ", "stops a run with a signal mid-training: the test named beside it does"),
]

# Commands of modelforge whose set-up is a moment or a machine this script does not make, and why; the page names
# the test that makes it beside each.
SET_UPS: list[tuple[str, str]] = [
    (r".*\s&(\s|$)", "needs a second process or a signal at a chosen moment: the test named beside it makes them"),
    (r".*kill -", "needs a signal at a chosen moment: the test named beside it sends it"),
    (r".*/mnt/", "needs a full disk (a small tmpfs, mounted as root): the test named beside it mounts one"),
    (r".*data=fashion_mnist$", "needs a machine without Fashion-MNIST's files or a network"),
]


def not_run_reason(command: Command) -> str | None:
    setup = next((reason for pattern, reason in SET_UPS if re.match(pattern, command.text)), None)
    if command.runs_modelforge and command.kind == "transcript" and setup:
        return setup
    if command.runs_modelforge or command.text.startswith("pip install ./my_blocks"):
        return None
    return next((reason for pattern, reason in NOT_RUN if re.match(pattern, command.text)), None)


def unknown(commands: list[Command]) -> list[Command]:
    """Commands this script neither runs nor knows a reason not to run."""
    return [c for c in commands if not c.runs_modelforge and not c.text.startswith("pip install ./my_blocks")
            and not_run_reason(c) is None]


def project_files(page_paths: list[Path] | None = None) -> dict[str, str]:
    """The user project's files: each fenced block whose introducing paragraph names its path (and ends in ':')."""
    files = {}
    for page in page_paths or pages():
        paragraph: list[str] = []  # the last paragraph of prose, kept over the blank line before a block
        body: list[str] | None = None  # inside a fenced block
        blank = True
        for line in page.read_text().splitlines():
            if body is None and line.startswith("```"):
                intro = " ".join(paragraph)
                named = re.search(r"`((?:configs|my_blocks|model)/[\w/.]+)`", intro)
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


# Keys whose values are paths a command reads, for the check that each is a placeholder or made earlier.
READ_PATH_KEYS = ("ckpt_path=", "inputs=", "data.data_dir=", "data.root=", "init.from=", "--config-dir")
# Keys whose values are paths a command writes: in a checkout they must be under outputs/, which git ignores.
WRITTEN_PATH_KEYS = ("hydra.run.dir=", "hydra.sweep.dir=", "output=", "summary.graph=", "--out")


def _values_of(command: Command, keys: tuple[str, ...]) -> list[str]:
    argv = command.argv
    values = []
    for i, arg in enumerate(argv):
        for key in keys:
            if arg == key and i + 1 < len(argv):
                values.append(argv[i + 1])
            elif arg.startswith(key) and key.endswith("="):
                values.append(arg[len(key):])
    return values


def paths_read(command: Command) -> list[str]:
    """The relative paths a command reads (not its outputs), as written."""
    paths = _values_of(command, READ_PATH_KEYS)
    paths += [arg[len("model="):] for arg in command.argv if arg.startswith("model=") and arg.endswith(".yaml")]
    paths = [p for path in paths for p in (path.strip("[]").split(",") if path.startswith("[") else [path])]
    return [path for path in paths if not path.startswith(("$", "/")) and ":" not in path.split("/")[0]]


def paths_written(command: Command) -> list[str]:
    """The relative paths a command writes, as written (not into a placeholder such as RUN, which stands for a
    directory of the user's)."""
    return [path for path in _values_of(command, WRITTEN_PATH_KEYS)
            if not path.startswith(("$", "/")) and not path.split("/")[0].isupper()]

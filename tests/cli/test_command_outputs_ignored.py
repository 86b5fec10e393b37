"""What the documented commands leave in a checkout (``hydra.run.dir=outputs/runs/mnist``,
``output=outputs/deploy/``, ``summary.graph=outputs/graph.svg``, ...) is ignored by git, and source folders of
the same names are not."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from tests.conftest import REPO

# A command's option that names where it writes, and a relative path as its value.
OUTPUT = re.compile(r"(hydra\.run\.dir|hydra\.sweep\.dir|output|summary\.graph)=['\"]?([A-Za-z0-9_][\w./-]*)")


def _documented_outputs() -> set[str]:
    pages = [REPO / "README.md", *(REPO / "docs").rglob("*.md")]  # the pages experiments/readme_commands.py runs
    found = set()
    for page in pages:
        for key, path in OUTPUT.findall(page.read_text(encoding="utf-8")):
            first = path.rstrip("./").split("/")[0]
            # not a placeholder (RUN, FILE.svg), nor under bad/: errors.md's damaged files, where each command
            # is refused and writes nothing
            if first and not first.split(".")[0].isupper() and first != "bad":
                path = path.rstrip(".")
                found.add(f"{path.rstrip('/')}/" if key.startswith("hydra.") else path)  # a run's directory
    return found


def _ignored(path: str) -> bool:
    return subprocess.run(["git", "check-ignore", "-q", "--no-index", path], cwd=REPO).returncode == 0


@pytest.mark.skipif(shutil.which("git") is None or not (REPO / ".git").exists(), reason="needs a git checkout")
def test_what_documented_commands_write_is_ignored_and_source_is_not() -> None:
    outputs = _documented_outputs()
    # the finder finds what the pages run
    assert {"outputs/runs/mnist/", "outputs/deploy/", "outputs/graph.svg", "outputs/preds.csv"} <= outputs
    assert [path for path in sorted(outputs) if not _ignored(path)] == []
    for source in ("modelforge/deploy/load.py", "tests/deploy/test_load.py", "modelforge/train/run.py"):
        assert not _ignored(source), source
    for made in ("outputs/train/x/metrics.json", "optuna_sweep/optuna.db", "runs/mnist/metrics.json"):
        assert _ignored(made), made

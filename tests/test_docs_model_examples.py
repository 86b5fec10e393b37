"""Every model example of the site, saved exactly as the page shows it, builds with ``summary model=FILE.yaml``:
the docs' ``model-example`` directive adds nothing to the text it checks, and neither does this test."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.conftest import REPO

def _examples() -> list[tuple[str, str]]:
    """(page:line, the example's text) of every ``{model-example}`` block of docs/*.md."""
    found = []
    for page in sorted((REPO / "docs").glob("*.md")):
        for match in re.finditer(r"^```\{model-example\}\n(.*?)^```$", page.read_text(), re.S | re.M):
            line = page.read_text()[:match.start()].count("\n") + 1
            found.append((f"{page.name}:{line}", match.group(1)))
    return found


def test_the_site_has_its_model_examples() -> None:
    assert len(_examples()) >= 19


@pytest.mark.parametrize(("where", "text"), _examples(), ids=[where for where, _ in _examples()])
def test_a_model_example_saved_as_shown_builds(where: str, text: str, tmp_path: Path, run_main) -> None:
    assert not text.startswith(":"), f"{where}: directive options would not be in the reader's file"
    (tmp_path / "example.yaml").write_text(text)
    result = run_main("summary", "model=example.yaml", cwd=tmp_path)
    assert result.returncode == 0, f"{where}: {result.stderr}"
    assert "Total params:" in result.stdout

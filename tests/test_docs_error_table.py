"""docs/errors.md's table of every message is read from the error pages when the site is built: each ``error:``
line of their transcripts is a row, with the exit status the transcript shows."""

from __future__ import annotations

import importlib.util
import re

from tests.conftest import REPO

_SPEC = importlib.util.spec_from_file_location("error_table", REPO / "docs" / "_ext" / "error_table.py")
error_table = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(error_table)


def test_every_error_line_of_the_error_pages_is_a_row() -> None:
    rows = error_table.error_messages(REPO / "docs")
    shown = [line for page in error_table.ERROR_PAGES
             for block in re.findall(r"^```console\n(.*?)^```$", (REPO / "docs" / f"{page}.md").read_text(), re.S | re.M)
             for line in block.splitlines() if line.startswith("error:")]
    assert [row[0] for row in rows] == shown and len(rows) >= 100
    by_message = {row[0]: row for row in rows}
    assert by_message["error: trainer.max_epoch: no key 'max_epoch' at 'trainer'"][1:] == (
        "2", "errors-config", "Config: Typo'd key", "config")
    assert {row[1] for row in rows} >= {"1", "2", "3"}  # the `(exit N)` notes of faults and divergence


def test_the_hub_page_shows_the_table_and_links_every_error_page() -> None:
    hub = (REPO / "docs" / "errors.md").read_text()
    assert "```{error-messages}" in hub
    assert all(f"({page}.md)" in hub for page in error_table.ERROR_PAGES)

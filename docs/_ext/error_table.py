"""The rows of docs/errors.md's table, read from the error pages' transcripts: plain Python, no Sphinx, so a test
reads them without the docs extras."""

from __future__ import annotations

import re
from pathlib import Path

ERROR_PAGES = ("errors-config", "errors-model", "errors-data", "errors-runs")


def error_messages(folder: Path) -> list[tuple[str, str, str, str, str]]:
    """(message, exit status, page, where (section: case), section anchor) of every transcript that shows an ``error:``
    line on the error pages, in page order: read from the pages themselves, so the table never lags them."""
    rows = []
    for page in ERROR_PAGES:
        section, case = ("", ""), ""
        lines = (folder / f"{page}.md").read_text().splitlines()
        inside = False
        for line in lines:
            if line.startswith("```"):
                inside = not inside and line.strip() == "```console"
                continue
            if not inside and line.startswith("## "):
                title = line[3:].strip()
                section = (title, re.sub(r"[^\w\- ]", "", title.lower()).strip().replace(" ", "-"))
                case = ""
            elif not inside and (label := re.match(r"\*\*(.+?)\*\*", line)):
                case = label.group(1)
            elif inside and line.startswith("error:"):
                rows.append((line, "2", page, f"{section[0]}: {case}" if case else section[0], section[1]))
            elif inside and (exit_note := re.match(r"\(exit (\d+)", line)) and rows and rows[-1][2] == page:
                rows[-1] = (rows[-1][0], exit_note.group(1), *rows[-1][2:])
    return rows

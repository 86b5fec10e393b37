"""What a run's console output must look like, and a runner of the CLI in a pseudo-terminal.

``console_problems`` checks output that went to a file or a pipe (``... 2>&1 | cat``):

- no warning: no line with ``warn`` in any case (Python's ``UserWarning: ...``, Lightning's
  ``PossibleUserWarning``, a logged ``[WARNING]``);
- no ANSI escape sequence (``ESC [``: colours, cursor moves);
- no carriage return: a progress bar redrawing its line, whose fragments a file keeps;
- every line starts at column 0, not with whitespace, and a log record (``[2026-01-31 12:00:00,000][``)
  only at the start of a line: a record after other text on its line was glued to a fragment.
"""

from __future__ import annotations

import os
import pty
import re
import select
import subprocess
import sys
import time
from pathlib import Path

from tests.conftest import child_env

LOG_RECORD = re.compile(r"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}\]\[")
ANSI_SEQUENCE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
# Lightning's rank-zero notices and its checkpoint notice: none of them tells a modelforge user anything.
LIGHTNING_NOTICES = ("Tip:", "GPU available", "TPU available", "`Trainer.fit` stopped", "weights_only",
                     "Loading `train_dataloader`", "log_every_n_steps")


def console_problems(text: str) -> list[str]:
    """Each line of piped output that breaks the rules above, with what is wrong with it."""
    problems = []
    for number, line in enumerate(text.split("\n"), 1):
        where = f"line {number}: {line[:160]!r}"
        if "\x1b[" in line:
            problems.append(f"ANSI escape sequence, {where}")
        if "\r" in line:
            problems.append(f"carriage return (a redrawn progress bar), {where}")
        if line[:1].isspace():
            problems.append(f"starts with whitespace, {where}")
        if re.search("warn", line, re.IGNORECASE):
            problems.append(f"a warning, {where}")
        if LOG_RECORD.search(line) and not LOG_RECORD.match(line):
            problems.append(f"log record glued to the text before it, {where}")
        problems += [f"Lightning's notice {notice!r}, {where}" for notice in LIGHTNING_NOTICES if notice in line]
    return problems


def glued_log_records(terminal_output: str) -> list[str]:
    """Log records a terminal would show after other text on their line (escape sequences removed):
    each must start the output, or follow a newline or a carriage return (the cursor at column 0)."""
    text = ANSI_SEQUENCE.sub("", terminal_output)
    return [text[max(0, m.start() - 80):m.start() + 80] for m in LOG_RECORD.finditer(text)
            if m.start() > 0 and text[m.start() - 1] not in "\r\n"]


def run_in_terminal(*args: str, cwd: Path, timeout: float = 300) -> tuple[int, str]:
    """``python -m modelforge ARGS`` with a pseudo-terminal as its stdin, stdout and stderr:
    its exit code and everything it wrote there, escape sequences and carriage returns included."""
    env = child_env(TERM="xterm-256color")
    main, child_end = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "modelforge", *args], cwd=cwd, env=env,
                            stdin=child_end, stdout=child_end, stderr=child_end, close_fds=True)
    os.close(child_end)
    chunks: list[bytes] = []
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            if not select.select([main], [], [], 1.0)[0]:
                if proc.poll() is not None:
                    break
                continue
            try:
                data = os.read(main, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not data:
                break
            chunks.append(data)
        code = proc.wait(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(main)
    return code, b"".join(chunks).decode("utf-8", errors="replace")

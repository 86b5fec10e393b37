"""Several names of one file (hard links, a symlink, a glob over them) are one row of predict's output, and the
command says which names it left out, in a real process over real links."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
from PIL import Image

from tests.conftest import run_cli


def test_names_of_one_file_are_one_row_and_said(small_run: Path, tmp_path: Path) -> None:
    digits = tmp_path / "digits"
    digits.mkdir()
    Image.fromarray((np.arange(28 * 28) % 200).astype(np.uint8).reshape(28, 28)).save(digits / "a.png")
    os.link(digits / "a.png", digits / "b.png")
    (digits / "c.png").symlink_to("a.png")
    Image.fromarray(np.zeros((28, 28), dtype=np.uint8)).save(digits / "other.png")
    csv = tmp_path / "out.csv"
    result = run_cli("predict", f"ckpt_path={small_run}", f"inputs={digits}", f"output={csv}")
    assert result.returncode == 0, result.stderr
    assert [line.split(",")[0] for line in csv.read_text().splitlines()[1:]] == [str(digits / "a.png"),
                                                                                 str(digits / "other.png")]
    assert ("[WARNING] modelforge.deploy.images: 2 names of files already named left out (one row per file): "
            f"{digits / 'b.png'} (= {digits / 'a.png'}), {digits / 'c.png'} (= {digits / 'a.png'})"
            ) in result.stdout.splitlines()
    assert "2 images classified" in result.stdout

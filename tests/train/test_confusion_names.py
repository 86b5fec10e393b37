"""Class names the font cannot draw (a class named 猫) are drawn as their numbers, said in one line, where
matplotlib warned once per character and drew an empty box."""

from __future__ import annotations

import logging
import warnings
from pathlib import Path

import pytest
import torch
from PIL import Image

from modelforge.report.confusion_matrix import draw_confusion_matrix


def test_names_without_glyphs_are_drawn_as_numbers_and_said(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    counts = torch.tensor([[3, 1], [0, 4]])
    with warnings.catch_warnings(), caplog.at_level(logging.INFO):
        warnings.simplefilter("error")  # matplotlib's "Glyph ... missing from font" fails the test
        path = draw_confusion_matrix(counts, tmp_path / "cm.png", ["猫", "dog"])
    assert Image.open(path).size[0] > 0
    assert "confusion matrix: classes drawn as their numbers, as the font has no glyph for 猫 (0: 猫, 1: dog)" \
        in caplog.text


def test_names_the_font_draws_are_kept(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO):
        draw_confusion_matrix(torch.eye(2, dtype=torch.long), tmp_path / "cm.png", ["cat", "dog"])
    assert "drawn as their numbers" not in caplog.text

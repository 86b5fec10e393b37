"""IDX parsing: raw and gzip, header checks, and corrupt input."""

from __future__ import annotations

import ast
import gzip
from pathlib import Path

import pytest
import torch

from modelforge.data.idx import IMAGES_MAGIC, LABELS_MAGIC, parse_idx, read_idx_bytes
from modelforge.errors import DataError
from tests.data_helpers import idx_bytes, write_idx

IMAGES = torch.arange(3 * 28 * 28, dtype=torch.int64).remainder(256).to(torch.uint8).reshape(3, 28, 28)


@pytest.mark.parametrize("name", ["images-idx3-ubyte", "images-idx3-ubyte.gz"])
def test_reads_raw_and_gzip(tmp_path: Path, name: str) -> None:
    path = write_idx(tmp_path / name, idx_bytes(IMAGES, IMAGES_MAGIC))
    assert path.read_bytes()[:2] == (b"\x1f\x8b" if name.endswith(".gz") else b"\x00\x00")
    images = parse_idx(read_idx_bytes(path), magic=IMAGES_MAGIC)
    assert images.dtype == torch.uint8
    assert torch.equal(images, IMAGES)


def test_reads_labels() -> None:
    labels = torch.tensor([3, 1, 4, 1, 5], dtype=torch.uint8)
    assert torch.equal(parse_idx(idx_bytes(labels, LABELS_MAGIC), magic=LABELS_MAGIC), labels)


def test_empty_file_of_zero_images() -> None:
    empty = parse_idx(idx_bytes(torch.zeros(0, 28, 28, dtype=torch.uint8), IMAGES_MAGIC), magic=IMAGES_MAGIC)
    assert empty.shape == (0, 28, 28)


def test_wrong_magic_names_both_numbers() -> None:
    labels = idx_bytes(torch.zeros(5, dtype=torch.uint8), LABELS_MAGIC)
    with pytest.raises(DataError, match=r"^x-file: wrong magic number 2049 .*expected 2051 .*not an MNIST images"):
        parse_idx(labels, magic=IMAGES_MAGIC, where="x-file")


def test_length_must_match_header() -> None:
    data = idx_bytes(IMAGES, IMAGES_MAGIC)
    with pytest.raises(DataError, match=r"x: truncated: expected 2368 bytes for dims \[3, 28, 28\], found 2000"):
        parse_idx(data[:2000], magic=IMAGES_MAGIC, where="x")
    with pytest.raises(DataError, match=r"x: too long: expected 2368 bytes .*found 2369"):
        parse_idx(data + b"\0", magic=IMAGES_MAGIC, where="x")
    with pytest.raises(DataError, match=r"x: truncated: 2 bytes, too short for an IDX header"):
        parse_idx(data[:2], magic=IMAGES_MAGIC, where="x")
    with pytest.raises(DataError, match=r"x: truncated: expected at least 16 header bytes, found 10"):
        parse_idx(data[:10], magic=IMAGES_MAGIC, where="x")


def test_corrupt_gzip_names_the_file(tmp_path: Path) -> None:
    cut = tmp_path / "cut-idx3-ubyte.gz"
    cut.write_bytes(gzip.compress(idx_bytes(IMAGES, IMAGES_MAGIC))[:100])
    with pytest.raises(DataError, match=r"cut-idx3-ubyte.gz: corrupt gzip"):
        read_idx_bytes(cut)
    not_gzip = write_idx(tmp_path / "plain-idx3-ubyte.gz", b"")
    not_gzip.write_bytes(idx_bytes(IMAGES, IMAGES_MAGIC))
    with pytest.raises(DataError, match=r"plain-idx3-ubyte.gz: corrupt gzip"):
        read_idx_bytes(not_gzip)


def test_unreadable_file_is_a_data_error(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"nothing-here: cannot be read"):
        read_idx_bytes(tmp_path / "nothing-here")


def test_no_assert_statements_in_the_data_layer() -> None:
    # Checks done with `assert` vanish under `python -O`; these must always run.
    package = Path(__file__).resolve().parents[2] / "modelforge" / "data"
    for source in sorted(package.glob("*.py")):
        tree = ast.parse(source.read_text(), filename=str(source))
        asserts = [node.lineno for node in ast.walk(tree) if isinstance(node, ast.Assert)]
        assert not asserts, f"{source.name} uses assert at lines {asserts}"

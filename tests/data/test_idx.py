"""IDX files: parsing raw and gzip, header checks, corrupt input, and the checks of a data set's four files."""

from __future__ import annotations

import ast
import gzip
from pathlib import Path

import pytest
import torch

from modelforge.data import find_file
from modelforge.data.idx import (
    FASHION_MNIST,
    FILE_NAMES,
    IMAGES_MAGIC,
    KNOWN_DATASETS,
    LABELS_MAGIC,
    MNIST,
    load_idx_set,
    parse_idx,
    read_checked,
    read_idx_bytes,
)
from modelforge.errors import DataError
from tests.helpers.mnist_idx import idx_bytes, write_idx, write_idx_set, write_mnist_idx

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
    with pytest.raises(DataError, match=r"x: truncated: 2 bytes, too short for an IDX header of 16"):
        parse_idx(data[:2], magic=IMAGES_MAGIC, where="x")
    with pytest.raises(DataError, match=r"x: truncated: 10 bytes, too short for an IDX header of 16"):
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


def _paths(folder: Path) -> dict[str, Path]:
    return {name: find_file(folder, name) for name in FILE_NAMES}


@pytest.mark.parametrize("gz", [True, False])
def test_loads_generated_files_checked_against_their_md5s(tmp_path: Path, gz: bool) -> None:
    tiny = write_mnist_idx(tmp_path, n_train=64, n_test=32, gz=gz)
    splits = load_idx_set(_paths(tmp_path), tiny)  # verify=True against the set's md5s
    images, labels = splits["train"]
    assert images.shape == (64, 28, 28) and images.dtype == torch.uint8
    assert labels.shape == (64,) and labels.dtype == torch.int64
    assert labels.bincount().tolist() == [7, 7, 7, 7, 6, 6, 6, 6, 6, 6]  # 0..9 cycled over 64 images
    assert splits["test"][0].shape == (32, 28, 28)


def test_checksum_mismatch_names_file_and_both_md5s(tmp_path: Path) -> None:
    # Right size and a valid header, wrong content: only the md5 can tell.
    path = write_idx(tmp_path / "t10k-labels-idx1-ubyte", idx_bytes(torch.full((10000,), 7, dtype=torch.uint8), 2049))
    with pytest.raises(DataError, match=r"t10k-labels-idx1-ubyte: checksum mismatch: md5 of the uncompressed bytes "
                                        r"is [0-9a-f]{32}, expected 27ae3e4e09519cfbb04c329615203637; the file is "
                                        r"damaged or not the original MNIST\n  hint: .*use data=idx"):
        read_checked(path, "t10k-labels-idx1-ubyte", MNIST)
    assert read_checked(path, "t10k-labels-idx1-ubyte", MNIST, verify=False).shape == (10000,)


def test_generated_files_are_not_mnist(mnist_dir) -> None:
    folder, _ = mnist_dir
    with pytest.raises(DataError, match=r"train-images-idx3-ubyte.gz: checksum mismatch.*not the original MNIST"):
        load_idx_set(_paths(folder), MNIST)
    assert len(load_idx_set(_paths(folder), MNIST, verify=False)["train"][1]) == 64


def test_header_check_stays_without_verify(mnist_dir) -> None:
    folder, _ = mnist_dir
    write_idx(folder / "t10k-labels-idx1-ubyte.gz", idx_bytes(torch.zeros(32, dtype=torch.uint8), 2049)[:-5])
    with pytest.raises(DataError, match=r"t10k-labels-idx1-ubyte.gz: truncated: expected 40 bytes .*found 35"):
        load_idx_set(_paths(folder), MNIST, verify=False)


def test_wrong_magic_names_file(mnist_dir) -> None:
    folder, _ = mnist_dir
    write_idx(folder / "t10k-images-idx3-ubyte.gz", idx_bytes(torch.zeros(32, dtype=torch.uint8), 2049))
    with pytest.raises(DataError, match=r"t10k-images-idx3-ubyte.gz: wrong magic number 2049 .*expected 2051"):
        load_idx_set(_paths(folder), MNIST, verify=False)


def test_a_file_of_another_known_set_names_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    other = write_idx_set(tmp_path / "other", n_classes=10, size=(28, 28), n_train=10, n_test=10)
    monkeypatch.setitem(KNOWN_DATASETS, other.name, other)  # a third known set, as a plugin could add
    with pytest.raises(DataError, match=r"(?s)train-images-idx3-ubyte: checksum mismatch.*not the original MNIST"
                                        r"\n  this is Other: use data=other$"):
        load_idx_set(_paths(tmp_path / "other"), MNIST)


def test_known_sets_have_their_own_checksums() -> None:
    assert set(FASHION_MNIST.md5s).isdisjoint(MNIST.md5s) and len(FASHION_MNIST.md5s) == len(FILE_NAMES)
    assert len(FASHION_MNIST.classes) == 10 and FASHION_MNIST.classes[9] == "Ankle boot"


def test_counts_of_images_and_labels_must_match(mnist_dir) -> None:
    folder, _ = mnist_dir
    write_idx(folder / "train-labels-idx1-ubyte.gz", idx_bytes(torch.zeros(63, dtype=torch.uint8), 2049))
    with pytest.raises(DataError, match=r"train-images-idx3-ubyte.gz holds 64 images but .*"
                                        r"train-labels-idx1-ubyte.gz holds 63 labels"):
        load_idx_set(_paths(folder), MNIST, verify=False)


def test_labels_must_be_classes(mnist_dir) -> None:
    folder, _ = mnist_dir
    write_idx(folder / "t10k-labels-idx1-ubyte.gz", idx_bytes(torch.full((32,), 12, dtype=torch.uint8), 2049))
    with pytest.raises(DataError, match=r"t10k-labels-idx1-ubyte.gz: labels must be in 0..9, found 12"):
        load_idx_set(_paths(folder), MNIST, verify=False)
    assert load_idx_set(_paths(folder), None, verify=False)["test"][1].max() == 12  # data=idx: any labels
    with pytest.raises(DataError, match=r"labels must be in 0..4, found"):
        load_idx_set(_paths(folder), None, n_classes=5)


def test_images_must_be_the_sets_size(mnist_dir) -> None:
    folder, _ = mnist_dir
    write_idx(folder / "t10k-images-idx3-ubyte.gz", idx_bytes(torch.zeros(32, 14, 14, dtype=torch.uint8), 2051))
    with pytest.raises(DataError, match=r"t10k-images-idx3-ubyte.gz: images are \[14, 14\] pixels, expected 28x28"):
        load_idx_set(_paths(folder), MNIST, verify=False)


def test_raw_file_preferred_over_gz(mnist_dir) -> None:
    folder, _ = mnist_dir
    write_idx(folder / "t10k-labels-idx1-ubyte", idx_bytes(torch.full((32,), 3, dtype=torch.uint8), 2049))
    assert load_idx_set(_paths(folder), MNIST, verify=False)["test"][1].tolist() == [3] * 32


@pytest.mark.parametrize(("values", "magic"), [(IMAGES, IMAGES_MAGIC), (torch.tensor([7, 2, 1]), LABELS_MAGIC)])
def test_read_idx_reads_one_file_by_its_own_header(tmp_path: Path, values: torch.Tensor, magic: int) -> None:
    from modelforge.data import read_idx  # public: the API page's "Reading IDX files"

    path = write_idx(tmp_path / "file-ubyte.gz", idx_bytes(values, magic))
    assert torch.equal(read_idx(path), values.to(torch.uint8))


def test_read_idx_refuses_what_is_not_an_idx_file_of_bytes(tmp_path: Path) -> None:
    from modelforge.data import read_idx

    path = tmp_path / "notes.txt"
    path.write_bytes(b"abcdefgh")
    with pytest.raises(DataError, match=r"notes.txt: not an IDX file of unsigned bytes: it starts 61626364, "
                                        r"expected 000008 and the number of dims \(MNIST's images 00000803"):
        read_idx(path)

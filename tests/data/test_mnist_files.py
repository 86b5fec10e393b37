"""MNIST file checks: where data_dir points, reading, size/md5/header verification."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest
import torch

from modelforge.data.mnist_files import (
    MNIST_FILES,
    load_mnist,
    read_checked,
    resolve_data_dir,
)
from modelforge.errors import DataError
from tests.data_helpers import idx_bytes, write_idx, write_mnist_idx

T10K_LABELS = next(spec for spec in MNIST_FILES if spec.name == "t10k-labels-idx1-ubyte")


def test_data_dir_explicit_beats_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("MODELFORGE_DATA", str(tmp_path / "env"))
    assert resolve_data_dir(tmp_path / "given") == tmp_path / "given"
    assert resolve_data_dir("~/mnist") == Path.home() / "mnist"
    assert resolve_data_dir(None) == tmp_path / "env"


def test_data_dir_defaults_to_user_cache_not_cwd(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("MODELFORGE_DATA", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.chdir(tmp_path)
    assert resolve_data_dir(None) == tmp_path / "xdg" / "modelforge" / "mnist"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert resolve_data_dir("") == tmp_path / "home" / ".cache" / "modelforge" / "mnist"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/cache")  # invalid per the XDG spec: ignored
    assert resolve_data_dir(None) == tmp_path / "home" / ".cache" / "modelforge" / "mnist"


def test_no_data_dir_and_no_home_folder_is_one_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MODELFORGE_DATA", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)

    def no_home() -> Path:
        raise RuntimeError("Could not determine home directory.")

    monkeypatch.setattr(Path, "home", staticmethod(no_home))  # docker run --user 1234: no $HOME, no passwd entry
    with pytest.raises(DataError, match=r"^no folder for mnist: data.data_dir is unset and no home folder is "
                       r"known .*; set data.data_dir=/path/to/it \(or MODELFORGE_DATA\)$"):
        resolve_data_dir(None)


@pytest.mark.parametrize("gz", [True, False])
def test_loads_generated_files(tmp_path: Path, gz: bool) -> None:
    table = write_mnist_idx(tmp_path, n_train=64, n_test=32, gz=gz)
    splits = load_mnist(tmp_path, files=table, download=False)  # verify=True against the table
    images, labels = splits["train"]
    assert images.shape == (64, 28, 28) and images.dtype == torch.uint8
    assert labels.shape == (64,) and labels.dtype == torch.int64
    assert labels.bincount().tolist() == [7, 7, 7, 7, 6, 6, 6, 6, 6, 6]  # 0..9 cycled over 64 images
    assert splits["test"][0].shape == (32, 28, 28)


def test_truncated_file_names_file_and_sizes(mnist_dir) -> None:
    folder, _ = mnist_dir  # 64 generated images checked against the real MNIST sizes
    with pytest.raises(DataError, match=r"train-images-idx3-ubyte.gz: truncated: expected 47040016 bytes "
                                        r"\(uncompressed\), found 50192"):
        load_mnist(folder, download=False)


def test_size_check_is_off_without_verify_but_header_check_stays(mnist_dir) -> None:
    folder, _ = mnist_dir
    assert len(load_mnist(folder, download=False, verify=False)["train"][1]) == 64
    write_idx(folder / "t10k-labels-idx1-ubyte.gz", idx_bytes(torch.zeros(32, dtype=torch.uint8), 2049)[:-5])
    with pytest.raises(DataError, match=r"t10k-labels-idx1-ubyte.gz: truncated: expected 40 bytes .*found 35"):
        load_mnist(folder, download=False, verify=False)


def test_wrong_magic_names_file(mnist_dir) -> None:
    folder, table = mnist_dir
    labels = idx_bytes(torch.zeros(32, dtype=torch.uint8), 2049)
    write_idx(folder / "t10k-images-idx3-ubyte.gz", labels)  # a labels file under the images name
    with pytest.raises(DataError, match=r"t10k-images-idx3-ubyte.gz: wrong magic number 2049 .*expected 2051"):
        load_mnist(folder, download=False, verify=False)


def test_checksum_mismatch_on_right_length_file(tmp_path: Path) -> None:
    # Right size and a valid header, wrong content: only the md5 can tell.
    path = write_idx(tmp_path / "t10k-labels-idx1-ubyte", idx_bytes(torch.full((10000,), 7, dtype=torch.uint8), 2049))
    assert path.stat().st_size == T10K_LABELS.size
    with pytest.raises(DataError, match=r"t10k-labels-idx1-ubyte: checksum mismatch: md5 of the uncompressed "
                                        r"bytes is [0-9a-f]{32}, expected 27ae3e4e09519cfbb04c329615203637"):
        read_checked(path, T10K_LABELS)
    assert read_checked(path, T10K_LABELS, verify=False).shape == (10000,)


def test_checksum_table_is_injectable(mnist_dir) -> None:
    folder, table = mnist_dir
    wrong = tuple(dataclasses.replace(s, md5="0" * 32) if s.name.startswith("t10k-labels") else s for s in table)
    with pytest.raises(DataError, match=r"t10k-labels-idx1-ubyte.gz: checksum mismatch"):
        load_mnist(folder, files=wrong, download=False)


def test_checksum_cache_sees_a_changed_file(tmp_path: Path) -> None:
    table = write_mnist_idx(tmp_path, n_train=20, n_test=10, gz=False)
    spec = next(s for s in table if s.name == "t10k-labels-idx1-ubyte")
    path = tmp_path / spec.name
    read_checked(path, spec)  # caches the md5 of this version
    data = bytearray(path.read_bytes())
    data[-1] = (data[-1] + 1) % 10  # same size, other content
    path.write_bytes(bytes(data))
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))  # coarse-mtime filesystems
    with pytest.raises(DataError, match="checksum mismatch"):
        read_checked(path, spec)


def test_counts_of_images_and_labels_must_match(mnist_dir) -> None:
    folder, _ = mnist_dir
    write_idx(folder / "train-labels-idx1-ubyte.gz", idx_bytes(torch.zeros(63, dtype=torch.uint8), 2049))
    with pytest.raises(DataError, match=r"train-images-idx3-ubyte.gz holds 64 images but .*"
                                        r"train-labels-idx1-ubyte.gz holds 63 labels"):
        load_mnist(folder, download=False, verify=False)


def test_labels_must_be_digits(mnist_dir) -> None:
    folder, _ = mnist_dir
    write_idx(folder / "t10k-labels-idx1-ubyte.gz", idx_bytes(torch.full((32,), 12, dtype=torch.uint8), 2049))
    with pytest.raises(DataError, match=r"t10k-labels-idx1-ubyte.gz: labels must be in 0..9, found 12"):
        load_mnist(folder, download=False, verify=False)


def test_images_must_be_28x28(mnist_dir) -> None:
    folder, _ = mnist_dir
    write_idx(folder / "t10k-images-idx3-ubyte.gz", idx_bytes(torch.zeros(32, 14, 14, dtype=torch.uint8), 2051))
    with pytest.raises(DataError, match=r"t10k-images-idx3-ubyte.gz: images are \[14, 14\] pixels, expected 28x28"):
        load_mnist(folder, download=False, verify=False)


def test_raw_file_preferred_over_gz(mnist_dir) -> None:
    folder, _ = mnist_dir
    write_idx(folder / "t10k-labels-idx1-ubyte", idx_bytes(torch.full((32,), 3, dtype=torch.uint8), 2049))
    assert load_mnist(folder, download=False, verify=False)["test"][1].tolist() == [3] * 32

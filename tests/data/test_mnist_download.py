"""Fetching missing files: loopback mirrors only, never the internet."""

from __future__ import annotations

import dataclasses
import shutil
import time
from pathlib import Path

import pytest

from modelforge.data.mnist_files import MIRRORS, ensure_files, load_mnist
from modelforge.errors import DataError
from tests.data_helpers import write_mnist_idx

NAMES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")


def test_public_mirrors_are_https_folders() -> None:
    assert MIRRORS and all(m.startswith("https://") and m.endswith("/") for m in MIRRORS)


def test_offline_gives_one_error_with_files_mirrors_and_hint(tmp_path: Path, refused_url: str) -> None:
    empty = tmp_path / "nothing"
    start = time.monotonic()
    with pytest.raises(DataError) as caught:
        ensure_files(empty, mirrors=[refused_url, refused_url.replace("/mnist/", "/other/")])
    message = str(caught.value)
    assert message.startswith(f"MNIST files missing from data_dir {empty}: " + ", ".join(NAMES))
    assert f"{refused_url}: unreachable (connection refused)" in message
    assert "hint: put the four files" in message and "data.data_dir=" in message and "MODELFORGE_DATA" in message
    assert time.monotonic() - start < 5  # a refused mirror is skipped for the files after the first
    assert not empty.exists()  # the folder made for the downloads is removed: no .part files, no empty folder


def test_download_off_says_so(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"(?s)train-images-idx3-ubyte.*downloading is off \(data.download=false\)"):
        ensure_files(tmp_path, download=False)


def test_only_missing_files_are_listed(mnist_dir, refused_url: str) -> None:
    folder, _ = mnist_dir
    (folder / "t10k-labels-idx1-ubyte.gz").unlink()
    with pytest.raises(DataError, match=r"missing from data_dir .*: t10k-labels-idx1-ubyte \(.gz or uncompressed\)"):
        ensure_files(folder, mirrors=[refused_url])


def test_downloads_from_the_next_mirror(tmp_path: Path, refused_url: str, serve_dir) -> None:
    served = tmp_path / "served"
    table = write_mnist_idx(served, n_train=40, n_test=20, gz=True)
    target = tmp_path / "cache" / "mnist"  # created on demand
    splits = load_mnist(target, files=table, mirrors=[refused_url, serve_dir(served)])
    assert sorted(p.name for p in target.iterdir()) == sorted(f"{n}.gz" for n in NAMES)
    assert len(splits["train"][1]) == 40 and len(splits["test"][1]) == 20
    for name in NAMES:  # byte-identical copies
        assert (target / f"{name}.gz").read_bytes() == (served / f"{name}.gz").read_bytes()


def test_file_url_mirror(tmp_path: Path) -> None:
    served = tmp_path / "served"
    table = write_mnist_idx(served, n_train=20, n_test=10)
    splits = load_mnist(tmp_path / "target", files=table, mirrors=[served.as_uri() + "/"])
    assert len(splits["train"][1]) == 20


def test_download_failing_its_check_is_not_kept(tmp_path: Path, serve_dir) -> None:
    served = tmp_path / "served"
    table = write_mnist_idx(served, n_train=40, n_test=20)
    wrong = tuple(dataclasses.replace(s, md5="0" * 32) if s.name == "t10k-labels-idx1-ubyte" else s for s in table)
    target = tmp_path / "target"
    url = serve_dir(served)
    with pytest.raises(DataError, match=r"(?s)missing from data_dir .*: t10k-labels-idx1-ubyte \(.*"
                                        r"t10k-labels-idx1-ubyte.gz: downloaded file failed its check "
                                        r"\(checksum mismatch"):
        ensure_files(target, files=wrong, mirrors=[url])
    assert sorted(p.name for p in target.iterdir()) == sorted(f"{n}.gz" for n in NAMES[:3])


def test_http_errors_are_reported_per_file(tmp_path: Path, serve_dir) -> None:
    served = tmp_path / "served"
    write_mnist_idx(served)
    (served / "train-labels-idx1-ubyte.gz").unlink()
    with pytest.raises(DataError, match=r"train-labels-idx1-ubyte.gz: HTTP 404"):
        ensure_files(tmp_path / "target", mirrors=[serve_dir(served)], verify=False)


def test_unwritable_data_dir_is_a_data_error(tmp_path: Path, refused_url: str) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    with pytest.raises(DataError, match=r"missing from data_dir .*a-file/mnist: train-images.*; the folder cannot be created"):
        ensure_files(blocker / "mnist", mirrors=[refused_url])


def test_existing_files_need_no_mirror(mnist_dir) -> None:
    folder, table = mnist_dir
    copy = folder.parent / "copy"
    shutil.copytree(folder, copy)
    assert set(ensure_files(copy, files=table, mirrors=[])) == set(NAMES)

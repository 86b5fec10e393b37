"""The gunzipped copies of .gz data files kept in the user cache (modelforge.data.decoded_cache)."""

from __future__ import annotations

import hashlib
import logging
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import torch

from modelforge.data import decoded_cache, mnist_files
from modelforge.data.build import build_datamodule
from tests.data_helpers import write_mnist_idx


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty user cache; each load below starts a fresh process's in-memory state."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setattr(decoded_cache, "_warned", set())
    return tmp_path / "xdg" / "modelforge" / "decoded"


@pytest.fixture
def gunzips(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The files each load gunzips, in order."""
    calls: list[str] = []
    real = mnist_files.gunzip
    monkeypatch.setattr(mnist_files, "gunzip", lambda packed, where: calls.append(Path(where).name) or real(packed, where=where))
    return calls


def _load(folder: Path, table, **kwargs):
    mnist_files._decoded_cache.clear()  # as a new process would
    return mnist_files.load_mnist(folder, files=table, download=False, **kwargs)


def _entries(cache: Path) -> dict[str, str]:
    """entry name -> md5 of its bytes."""
    return {p.name: hashlib.md5(p.read_bytes()).hexdigest() for p in cache.iterdir()} if cache.exists() else {}


def test_the_next_read_takes_the_kept_copy_instead_of_gunzipping(tmp_path: Path, cache: Path, gunzips: list[str]) -> None:
    table = write_mnist_idx(tmp_path / "m", n_train=40, n_test=20)
    first = _load(tmp_path / "m", table)
    assert sorted(gunzips) == sorted(f"{spec.name}.gz" for spec in table)
    # One entry per file: <sha1 of the .gz bytes>.<md5 of the uncompressed bytes>.idx
    expected = {f"{hashlib.sha1((tmp_path / 'm' / (spec.name + '.gz')).read_bytes()).hexdigest()}.{spec.md5}.idx"
                for spec in table}
    assert set(_entries(cache)) == expected
    assert all(name.split(".")[1] == digest for name, digest in _entries(cache).items())

    gunzips.clear()
    second = _load(tmp_path / "m", table)
    assert gunzips == []
    for split in ("train", "test"):
        assert torch.equal(first[split][0], second[split][0]) and torch.equal(first[split][1], second[split][1])


def test_the_disk_cache_never_serves_a_changed_gz_file_the_old_copy(tmp_path: Path, cache: Path, gunzips: list[str]) -> None:
    folder = tmp_path / "m"
    old = _load(folder, write_mnist_idx(folder, n_train=40, n_test=20, seed=0))["train"]
    stamps = {p: (p.stat().st_atime_ns, p.stat().st_mtime_ns) for p in folder.iterdir()}
    new_table = write_mnist_idx(folder, n_train=40, n_test=20, seed=5)  # same names and sizes, other images
    for path, times in stamps.items():  # and the old dates: the key is the contents alone
        os.utime(path, ns=times)
    gunzips.clear()
    new = _load(folder, new_table)["train"]
    assert "train-images-idx3-ubyte.gz" in gunzips
    assert not torch.equal(new[0], old[0])
    assert hashlib.md5(new[0].numpy().tobytes()).hexdigest() != hashlib.md5(old[0].numpy().tobytes()).hexdigest()
    assert len(_entries(cache)) > 4  # the old file's entries stay, under their own key


def test_a_damaged_entry_is_dropped_and_kept_again(tmp_path: Path, cache: Path, gunzips: list[str],
                                                   caplog: pytest.LogCaptureFixture) -> None:
    table = write_mnist_idx(tmp_path / "m", n_train=40, n_test=20)
    good = _load(tmp_path / "m", table)["train"][0]
    (entry,) = [p for p in cache.iterdir() if p.stat().st_size == table[0].size]  # the training images
    damaged = bytearray(entry.read_bytes())
    damaged[500] ^= 0xFF
    entry.write_bytes(bytes(damaged))
    gunzips.clear()
    with caplog.at_level(logging.INFO, logger="modelforge.data.decoded_cache"):
        again = _load(tmp_path / "m", table)["train"][0]
    assert torch.equal(again, good)
    assert gunzips == ["train-images-idx3-ubyte.gz"]
    assert f"dropping damaged cache entry {entry}" in caplog.text
    assert _entries(cache)[entry.name] == table[0].md5  # rewritten whole


def test_a_cache_that_cannot_be_written_costs_only_the_gunzip(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                              gunzips: list[str], caplog: pytest.LogCaptureFixture) -> None:
    blocker = tmp_path / "not_a_folder"
    blocker.write_text("")  # $XDG_CACHE_HOME/modelforge cannot be created under a file (root included)
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))
    monkeypatch.setattr(decoded_cache, "_warned", set())
    table = write_mnist_idx(tmp_path / "m", n_train=40, n_test=20)
    with caplog.at_level(logging.WARNING, logger="modelforge.data.decoded_cache"):
        first = _load(tmp_path / "m", table)
        second = _load(tmp_path / "m", table)
    assert torch.equal(first["train"][0], second["train"][0])
    assert len(gunzips) == 8  # each run gunzips its four files, as without a cache
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1  # once per process, not once per file and run
    assert warnings[0].startswith(f"could not keep a gunzipped copy of the data in {blocker}/modelforge/decoded (")
    assert "data.cache_decoded=false stops trying" in warnings[0]


def test_no_home_folder_costs_only_the_gunzip(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, gunzips: list[str],
                                             caplog: pytest.LogCaptureFixture) -> None:
    """``docker run --user 1234``: no $HOME and no passwd entry, so ``Path.home()`` raises."""
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setattr(decoded_cache, "_warned", set())

    def no_home() -> Path:
        raise RuntimeError("Could not determine home directory.")

    monkeypatch.setattr(Path, "home", staticmethod(no_home))
    table = write_mnist_idx(tmp_path / "m", n_train=40, n_test=20)
    with caplog.at_level(logging.WARNING, logger="modelforge.data.decoded_cache"):
        images = _load(tmp_path / "m", table)["train"][0]
    assert images.shape == (40, 28, 28) and len(gunzips) == 4
    (warning,) = [r.getMessage() for r in caplog.records]
    assert "no home folder is known" in warning and "set XDG_CACHE_HOME" in warning


@pytest.mark.skipif(sys.platform != "linux" or os.geteuid() != 0, reason="mounting a tmpfs needs root on Linux")
def test_a_full_cache_disk_leaves_no_partial_entry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    disk = tmp_path / f"disk_{uuid.uuid4().hex[:6]}"
    disk.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=100k", "tmpfs", str(disk)], capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"mounting a tmpfs is not permitted here: {mounted.stderr.strip()}")
    try:
        monkeypatch.setenv("XDG_CACHE_HOME", str(disk))
        monkeypatch.setattr(decoded_cache, "_warned", set())
        table = write_mnist_idx(tmp_path / "m", n_train=300, n_test=20)  # 235 KB of training images: too big
        with caplog.at_level(logging.WARNING, logger="modelforge.data.decoded_cache"):
            images = _load(tmp_path / "m", table)["train"][0]
        assert images.shape == (300, 28, 28)
        assert "no space left" in caplog.text
        kept = {p.name: p.stat().st_size for p in (disk / "modelforge" / "decoded").iterdir()}
        assert not [name for name in kept if name.endswith(".tmp")]  # the failed write removed its temp file
        assert table[0].size not in kept.values()  # no entry of the images at all, rather than half of one
    finally:
        subprocess.run(["umount", str(disk)], check=False)


def test_off_keeps_nothing_and_raw_files_need_no_copy(tmp_path: Path, cache: Path, gunzips: list[str]) -> None:
    table = write_mnist_idx(tmp_path / "gz", n_train=40, n_test=20)
    data = build_datamodule({"name": "mnist", "data_dir": str(tmp_path / "gz"), "val_size": 8, "cache_decoded": False})
    data.files = table
    mnist_files._decoded_cache.clear()
    data.setup("fit")
    assert len(gunzips) == 4 and not cache.exists()

    raw_table = write_mnist_idx(tmp_path / "raw", n_train=40, n_test=20, gz=False)
    _load(tmp_path / "raw", raw_table)
    assert not cache.exists()


def test_a_killed_writers_temp_file_is_deleted_by_a_later_read(tmp_path: Path, cache: Path) -> None:
    """A SIGKILL mid-write leaves .NAME.*.tmp (atomic_io); an old one goes, a running writer's stays."""
    table = write_mnist_idx(tmp_path / "m", n_train=40, n_test=20)
    _load(tmp_path / "m", table)
    (entry,) = [p for p in cache.iterdir() if p.stat().st_size == table[0].size]
    stale, running = cache / f".{entry.name}.killed.tmp", cache / f".{entry.name}.running.tmp"
    for tmp in (stale, running):
        tmp.write_bytes(b"half an entry")
    old = time.time() - decoded_cache.STALE_TEMP_S - 60
    os.utime(stale, (old, old))
    _load(tmp_path / "m", table)  # a hit: nothing is written, the leftover still goes
    assert entry.exists() and not stale.exists() and running.exists()

"""Where the files live and fetching the missing ones: loopback mirrors only, never the internet."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from modelforge.data import MNIST, ensure_files, load_idx_set, resolve_data_dir
from modelforge.errors import DataError
from tests.helpers.mnist_idx import write_mnist_idx

NAMES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")
REPO = Path(__file__).resolve().parents[2]
UNREACHABLE = "http://127.0.0.1:9/"


def test_data_dir_explicit_beats_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("MODELFORGE_DATA", str(tmp_path / "env"))
    assert resolve_data_dir(tmp_path / "given") == tmp_path / "given"
    assert resolve_data_dir("~/mnist") == Path.home() / "mnist"
    assert resolve_data_dir(None) == tmp_path / "env"
    assert resolve_data_dir(None, "fashion_mnist") != tmp_path / "env"  # $MODELFORGE_DATA is MNIST's


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


def test_public_mirrors_are_https_folders() -> None:
    assert MNIST.mirrors and all(m.startswith("https://") and m.endswith("/") for m in MNIST.mirrors)


def test_offline_says_what_to_fetch_from_where_and_where_to_put_it(tmp_path: Path, refused_url: str) -> None:
    empty = tmp_path / "nothing"
    start = time.monotonic()
    with pytest.raises(DataError) as caught:
        ensure_files(empty, MNIST, mirrors=[refused_url, refused_url.replace("/mnist/", "/other/")])
    message = str(caught.value)
    assert message.startswith(f"MNIST files missing from data_dir {empty}: " + ", ".join(NAMES))
    assert f"{refused_url}: unreachable (" in message and "Connection refused" in message
    assert message.count(refused_url) == 2  # one line per mirror, and the hint: not one per file
    assert (f"hint: put {', '.join(n + '.gz' for n in NAMES)} from {refused_url} (or their uncompressed copies) "
            "into that folder, or point data.data_dir=/path/to/them (or MODELFORGE_DATA)") in message
    assert time.monotonic() - start < 5
    assert not empty.exists()  # the folder made for the downloads is removed: no temp files, no empty folder


def test_failed_download_removes_only_the_folders_it_made(tmp_path: Path) -> None:
    (tmp_path / "kept").mkdir()
    with pytest.raises(DataError, match="MNIST files missing from data_dir"):
        ensure_files(tmp_path / "kept" / "a" / "mnist", MNIST, mirrors=[UNREACHABLE], timeout=2)
    assert list(tmp_path.iterdir()) == [tmp_path / "kept"] and not list((tmp_path / "kept").iterdir())


def test_download_off_says_so(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"(?s)train-images-idx3-ubyte.*downloading is off \(data.download=false\)"):
        ensure_files(tmp_path, MNIST, download=False)


def test_a_folder_of_ones_own_is_never_fetched(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"^IDX files missing from data_dir .*\n  hint: put train-images-idx3-ubyte.gz,"
                                        r" .* \(or their uncompressed copies\) into that folder"):
        ensure_files(tmp_path, None, mirrors=[UNREACHABLE])


def test_only_missing_files_are_listed(mnist_dir, refused_url: str) -> None:
    folder, _ = mnist_dir
    (folder / "t10k-labels-idx1-ubyte.gz").unlink()
    with pytest.raises(DataError, match=r"missing from data_dir .*: t10k-labels-idx1-ubyte \(.gz or uncompressed\)"):
        ensure_files(folder, MNIST, mirrors=[refused_url])


def test_downloads_from_the_next_mirror(tmp_path: Path, refused_url: str, serve_dir) -> None:
    served = tmp_path / "served"
    tiny = write_mnist_idx(served, n_train=40, n_test=20, gz=True)
    target = tmp_path / "cache" / "mnist"  # created on demand
    paths = ensure_files(target, tiny, mirrors=[refused_url, serve_dir(served)])
    assert sorted(p.name for p in target.iterdir()) == sorted(f"{n}.gz" for n in NAMES)  # no temp files left
    assert len(load_idx_set(paths, tiny)["train"][1]) == 40
    for name in NAMES:  # byte-identical copies
        assert (target / f"{name}.gz").read_bytes() == (served / f"{name}.gz").read_bytes()


def test_file_url_mirror(tmp_path: Path) -> None:
    served = tmp_path / "served"
    tiny = write_mnist_idx(served, n_train=20, n_test=10)
    paths = ensure_files(tmp_path / "target", tiny, mirrors=[served.as_uri() + "/"])
    assert len(load_idx_set(paths, tiny)["train"][1]) == 20


def test_download_failing_its_check_is_not_kept(tmp_path: Path, serve_dir) -> None:
    served = tmp_path / "served"
    tiny = write_mnist_idx(served, n_train=40, n_test=20)
    wrong = dataclasses.replace(tiny, md5s=(*tiny.md5s[:3], "0" * 32))  # t10k-labels
    target = tmp_path / "target"
    with pytest.raises(DataError, match=r"(?s)missing from data_dir .*: t10k-labels-idx1-ubyte \(.*"
                                        r"t10k-labels-idx1-ubyte.gz: downloaded file failed its check "
                                        r"\(checksum mismatch"):
        ensure_files(target, wrong, mirrors=[serve_dir(served)])
    assert sorted(p.name for p in target.iterdir()) == sorted(f"{n}.gz" for n in NAMES[:3])


def test_http_errors_are_reported_per_file(tmp_path: Path, serve_dir) -> None:
    served = tmp_path / "served"
    tiny = write_mnist_idx(served)
    (served / "train-labels-idx1-ubyte.gz").unlink()
    with pytest.raises(DataError, match=r"(?s)missing from data_dir .*: train-labels-idx1-ubyte \(.*"
                                        r"train-labels-idx1-ubyte.gz: HTTP 404"):
        ensure_files(tmp_path / "target", tiny, mirrors=[serve_dir(served)])
    assert len(list((tmp_path / "target").iterdir())) == 3  # the other files of that mirror came


def test_uncreatable_data_dir_is_a_data_error(tmp_path: Path, refused_url: str) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    with pytest.raises(DataError, match=r"missing from data_dir .*a-file/mnist: train-images.*\n"
                                        r"  the folder cannot be created \(Not a directory\)"):
        ensure_files(blocker / "mnist", MNIST, mirrors=[refused_url])


def test_existing_files_need_no_mirror(mnist_dir) -> None:
    folder, tiny = mnist_dir
    copy = folder.parent / "copy"
    shutil.copytree(folder, copy)
    assert set(ensure_files(copy, tiny, mirrors=[])) == set(NAMES)


FETCH = """
import json, sys
from modelforge.data import IdxDataset, ensure_files
spec = IdxDataset(**{k: tuple(v) if isinstance(v, list) else v for k, v in json.loads(sys.argv[3]).items()})
ensure_files(__import__("pathlib").Path(sys.argv[1]), spec, mirrors=[sys.argv[2]])
"""


def _fetch_process(target: Path, url: str, tiny) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    return subprocess.Popen([sys.executable, "-c", FETCH, str(target), url, json.dumps(dataclasses.asdict(tiny))],
                            env=env, stderr=subprocess.PIPE, text=True)


@pytest.mark.e2e
def test_two_processes_fetching_one_folder_both_get_whole_files(tmp_path: Path, serve_dir) -> None:
    served = tmp_path / "served"
    tiny = write_mnist_idx(served, n_train=400, n_test=100)
    url = serve_dir(served)
    procs = [_fetch_process(tmp_path / "target", url, tiny) for _ in range(2)]
    for proc in procs:
        assert proc.wait(timeout=120) == 0, proc.stderr.read()[-3000:]
    assert sorted(p.name for p in (tmp_path / "target").iterdir()) == sorted(f"{n}.gz" for n in NAMES)
    for name in NAMES:
        assert (tmp_path / "target" / f"{name}.gz").read_bytes() == (served / f"{name}.gz").read_bytes()


@pytest.mark.e2e
def test_a_download_killed_midway_leaves_no_file_under_the_real_name(tmp_path: Path, stalling_url, serve_dir) -> None:
    served = tmp_path / "served"
    tiny = write_mnist_idx(served, n_train=1000)  # half of its images is more than one read of the download
    target = tmp_path / "target"
    proc = _fetch_process(target, stalling_url(served), tiny)
    deadline = time.monotonic() + 60
    while not any(p.stat().st_size for p in target.glob(".*")) and time.monotonic() < deadline:
        time.sleep(0.05)  # until half of the first file has arrived
    assert any(p.stat().st_size for p in target.glob(".*")), "the download never started"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    assert not [p.name for p in target.iterdir() if not p.name.startswith(".")]  # only a hidden temp file
    ensure_files(target, tiny, mirrors=[serve_dir(served)])  # the leftover does not get in the way
    assert sorted(p.name for p in target.iterdir() if not p.name.startswith(".")) == sorted(f"{n}.gz" for n in NAMES)

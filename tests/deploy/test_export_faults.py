"""export under faults and at its edges: a full disk (a real 2 MiB tmpfs) in each format, SIGTERM while the file is
written (a real signal to a real process), an earlier export of the same name, an output folder named with a
trailing slash. Each is one line with an honest exit code, no temp file, and the earlier files as they were."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from modelforge.deploy.export import FORMATS, export
from modelforge.errors import ConfigError
from tests.conftest import child_env, run_cli
from tests.helpers.small_runs import needs_onnx, train_mlp

ALL_FORMATS = ["pt2", pytest.param("onnx", marks=needs_onnx), "torchscript"]
needs_root = pytest.mark.skipif(sys.platform != "linux" or os.geteuid() != 0, reason="mounting a tmpfs needs root")


@pytest.fixture(scope="module")
def big_run(tiny_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An mlp whose export (about 800 KB: 784 x 256 weights) does not fit the nearly full disk below."""
    return train_mlp(tiny_data, tmp_path_factory.mktemp("runs") / "big", hidden=256)


@pytest.fixture
def nearly_full_disk(tmp_path: Path) -> Iterator[Path]:
    """A 2 MiB tmpfs with a 1.4 MB file in it: about 600 KB free."""
    disk = tmp_path / f"disk_{uuid.uuid4().hex[:6]}"
    disk.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(disk)], capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"mounting a tmpfs is not permitted here: {mounted.stderr.strip()}")
    try:
        (disk / "filler.bin").write_bytes(os.urandom(1_400_000))
        yield disk
    finally:
        subprocess.run(["umount", str(disk)], check=False)


def _contents(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


@needs_root
@pytest.mark.parametrize("format", ALL_FORMATS)
def test_a_full_disk_is_one_line_exit_1_and_the_earlier_files_stay(format: str, run_main, small_run: Path,
                                                                   big_run: Path, nearly_full_disk: Path) -> None:
    target = nearly_full_disk / f"model{FORMATS[format]}"
    earlier = run_main("export", f"ckpt_path={small_run}", f"format={format}", f"output={target}", "check=false")
    assert earlier.returncode == 0, earlier.stderr
    before = _contents(nearly_full_disk)
    result = run_main("export", f"ckpt_path={big_run}", f"format={format}", f"output={target}", "overwrite=true")
    assert result.returncode == 1, result.stderr
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr, result.stderr
    needed, free = re.fullmatch(rf"error: no space left in {nearly_full_disk} to write {target.name}: it needs about "
                                r"(\d+\.\d) KB, (\d+\.\d) KB free; the files written before are kept\n",
                                result.stderr).groups()
    assert 784 <= float(needed) < 900 and 400 < float(free) < 700  # 784 x 256 float32 weights and more; 2 MiB - 1.4 MB
    assert _contents(nearly_full_disk) == before  # the earlier export whole, no temp file


@needs_root
@pytest.mark.e2e
def test_a_full_disk_in_a_process_of_its_own_is_not_an_abort(big_run: Path, nearly_full_disk: Path) -> None:
    """torch's zip writer aborted the process (exit 134, 'terminate called ... unexpected pos') when it wrote
    the file itself."""
    before = _contents(nearly_full_disk)
    result = run_cli("export", f"ckpt_path={big_run}", "format=pt2", f"output={nearly_full_disk}/")
    assert result.returncode == 1, result.stderr
    assert result.stderr.strip().splitlines() == [
        next(line for line in result.stderr.splitlines() if line.startswith("error: no space left in "))]
    assert _contents(nearly_full_disk) == before


# A real process whose file write is slowed down, so that the signal lands inside it: the pt2 bytes are written in
# chunks (write_with), the ONNX program saves to a path and then sleeps (write_to_path).
SLOW_WRITES = textwrap.dedent("""
    import sys, time
    import modelforge.deploy.exporters as exporters
    from modelforge.files import atomic

    def slow_bytes(path, data, committed=None):
        def write(handle):
            for start in range(0, len(data), 4096):
                handle.write(data[start:start + 4096])
                if start == 0:
                    print("writing", flush=True)
                    time.sleep(60)
        atomic.write_with(path, write, needed=len(data), committed=committed)

    def slow_path(path, save, needed=None, committed=None):
        def slow(temp):
            save(temp)
            print("writing", flush=True)
            time.sleep(60)
        atomic.write_to_path(path, slow, needed, committed)

    exporters.write_bytes, exporters.write_to_path = slow_bytes, slow_path
    from modelforge.__main__ import main
    sys.exit(main(sys.argv[1:]))
""")


@pytest.mark.e2e
# onnx: 13 s, slow; its temp file is cleaned by the same atomic writer as pt2's
@pytest.mark.parametrize("format", ["pt2", pytest.param("onnx", marks=[needs_onnx, pytest.mark.slow])])
def test_sigterm_while_the_file_is_written_cleans_up_and_exits_143(format: str, small_run: Path, tmp_path: Path) -> None:
    target = tmp_path / f"model{FORMATS[format]}"
    target.write_bytes(b"an earlier export")
    proc = subprocess.Popen([sys.executable, "-c", SLOW_WRITES, "export", f"ckpt_path={small_run}", f"format={format}",
                             f"output={target}", "overwrite=true"], cwd=tmp_path, env=child_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        for line in proc.stdout:  # the load's INFO line first
            if line == "writing\n":
                break
        else:
            raise AssertionError(proc.communicate()[1][-3000:])
        assert [p.name for p in tmp_path.iterdir() if ".tmp" in p.name]  # the temp file is there, being written
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 143, err
    assert err.strip() == (f"error: stopped by SIGTERM while writing {target}; it was not written and no temp file "
                           "is left; the earlier file there is unchanged")
    assert sorted(p.name for p in tmp_path.iterdir()) == [target.name] and target.read_bytes() == b"an earlier export"


def test_an_earlier_export_is_refused_before_any_work_unless_overwrite(run_main, small_run: Path, tmp_path: Path,
                                                                      capsys) -> None:
    path = export(small_run, "torchscript", tmp_path, check=False)
    written = path.read_bytes()
    capsys.readouterr()
    refused = run_main("export", f"ckpt_path={small_run}", "format=torchscript", "method=script", f"output={tmp_path}")
    assert refused.returncode == 2
    assert refused.stderr == (f"error: output: {path} exists (an earlier export); it is left untouched\n"
                              f"  hint: overwrite=true replaces it; output=OTHER.pt writes another file\n")
    assert "loaded" not in refused.stdout + refused.stderr and path.read_bytes() == written  # before the load
    replaced = run_main("export", f"ckpt_path={small_run}", "format=torchscript", "method=script",
                        f"output={tmp_path}", "overwrite=true", "check=false")
    assert replaced.returncode == 0, replaced.stderr
    assert path.read_bytes() != written  # scripted, not traced


def test_a_trailing_slash_names_a_folder_that_is_made(run_main, small_run: Path, tmp_path: Path) -> None:
    done = run_main("export", f"ckpt_path={small_run}", "format=pt2", "output=deploy/", "check=false", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in (tmp_path / "deploy").iterdir()) == ["last.pt2"]
    assert f"exported cnn to {tmp_path / 'deploy' / 'last.pt2'} (pt2, " in done.stdout  # the whole path
    (tmp_path / "file").write_text("")
    with pytest.raises(ConfigError, match=rf"^output: cannot write {tmp_path}/file/last\.pt2: {tmp_path}/file is a "
                                          r"file, not a folder$"):
        export(small_run, "pt2", f"{tmp_path}/file/", check=False)
    with pytest.raises(ConfigError, match=r"no folder .*/nowhere to write m\.pt2 in\n  hint: output=.*nowhere/ \(a "
                                          r"trailing slash\) makes the folder"):
        export(small_run, "pt2", tmp_path / "nowhere" / "m.pt2", check=False)


def child_env() -> dict[str, str]:
    env = {**os.environ, "HYDRA_FULL_ERROR": "0"}
    env.pop("PYTEST_CURRENT_TEST", None)
    return env

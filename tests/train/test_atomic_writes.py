"""Nothing half-written: temp file beside the target, fsync, rename; a full disk is one message."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import pytest
import torch

from modelforge.files.atomic import DiskFullError, write_json, write_text, write_with
from modelforge.train.checkpoints import AtomicCheckpointIO
from modelforge.train.records import write_metrics
from tests.helpers.run_config import tiny_cli_args
from tests.helpers.tmpfs import mount_tmpfs


def _no_space(handle) -> None:
    handle.write(b"partial")
    raise OSError(errno.ENOSPC, "No space left on device")


def test_enospc_keeps_the_old_file_removes_the_temp_and_says_where_and_how_much(tmp_path: Path) -> None:
    target = tmp_path / "metrics.json"
    write_text(target, "old\n")
    with pytest.raises(DiskFullError, match=rf"no space left in {tmp_path} to write metrics.json: it needs about "
                                            r"2.0 KB, .* free; the files written before are kept"):
        write_with(target, _no_space, needed=2048)
    assert target.read_text() == "old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["metrics.json"]


def test_a_failing_checkpoint_save_leaves_the_previous_checkpoint(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "last.ckpt"
    AtomicCheckpointIO().save_checkpoint({"step": 1, "w": torch.ones(10)}, path)

    def full_disk(obj, handle, *args, **kwargs):
        handle.write(b"PK\x03\x04 half a zip")
        raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598")

    monkeypatch.setattr(torch, "save", full_disk)
    with pytest.raises(DiskFullError, match="to write last.ckpt: it needs about 40 bytes"):
        AtomicCheckpointIO().save_checkpoint({"step": 2, "w": torch.ones(10)}, path)
    monkeypatch.undo()
    assert torch.load(path, weights_only=True)["step"] == 1
    assert [p.name for p in tmp_path.iterdir()] == ["last.ckpt"]


def test_ctrl_c_inside_torch_save_is_ctrl_c_not_a_full_disk(tmp_path: Path) -> None:
    """torch's zip writer turns a KeyboardInterrupt in the file's write into "unexpected pos" (a full disk's
    words), with the interrupt as its context: a signal mid-save exited 1 "no space left" instead of 130."""
    path = tmp_path / "last.ckpt"
    AtomicCheckpointIO().save_checkpoint({"step": 1, "w": torch.ones(10)}, path)
    calls: list[int] = []

    def interrupted_save(obj, handle, *args, **kwargs):
        def write(data):
            calls.append(len(data))
            if len(calls) == 3:
                raise KeyboardInterrupt
            return original(data)
        original, handle.write = handle.write, write
        return torch.serialization.save(obj, handle, *args, **kwargs)

    with pytest.raises(KeyboardInterrupt):
        write_with(path, lambda handle: interrupted_save({"step": 2, "w": torch.ones(100_000)}, handle))
    assert len(calls) == 3
    assert torch.load(path, weights_only=True)["step"] == 1 and [p.name for p in tmp_path.iterdir()] == ["last.ckpt"]


def test_metrics_of_a_failing_run_are_never_what_fails_it(tmp_path: Path, capsys, monkeypatch) -> None:
    import modelforge.train.records as rundir

    monkeypatch.setattr(rundir, "write_json", lambda path, data: write_with(path, _no_space))
    write_metrics(tmp_path / "metrics.json", {"status": "failed"}, failing=True)  # reported, not raised
    err = capsys.readouterr().err
    assert err.startswith(f"error: no space left in {tmp_path} to write metrics.json: it needs")
    # A finished run's: returned, for train() to raise once it has printed the figures.
    assert isinstance(write_metrics(tmp_path / "metrics.json", {"status": "finished"}, failing=False), DiskFullError)


def test_metrics_json_is_strict_json_with_null_for_non_finite_numbers(tmp_path: Path) -> None:
    write_json(tmp_path / "m.json", {"loss": float("nan"), "x": [float("inf"), 1.5], "ok": 2.0})

    def refuse(name: str):
        raise ValueError(f"non-standard JSON constant {name}")

    assert json.loads((tmp_path / "m.json").read_text(), parse_constant=refuse) == {"loss": None, "x": [None, 1.5],
                                                                                    "ok": 2.0}


@pytest.mark.e2e
def test_sigkill_mid_save_never_destroys_the_previous_checkpoint(tmp_path: Path) -> None:
    path = tmp_path / "ckpts" / "last.ckpt"
    script = textwrap.dedent(f"""
        import itertools, torch
        from modelforge.train.checkpoints import AtomicCheckpointIO
        io = AtomicCheckpointIO()
        for i in itertools.count():
            io.save_checkpoint({{"i": i, "w": torch.full((500_000,), float(i))}}, {str(path)!r})
            print(i, flush=True)
    """)
    for attempt in range(1):  # one kill: each start imports Lightning (slow on a busy machine)
        proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
        for _ in range(3 + attempt):  # saves done; the next one is under way when the kill lands
            assert proc.stdout.readline()
        proc.kill()
        proc.wait()
        saved = torch.load(path, weights_only=True)  # always a whole checkpoint
        assert torch.equal(saved["w"], torch.full((500_000,), float(saved["i"])))
        # What a kill can leave is a temp file beside the target, never in another filesystem.
        assert {p.name for p in path.parent.iterdir() if p.name != "last.ckpt"} <= {
            p.name for p in path.parent.glob(".last.ckpt.*.tmp")}


@pytest.mark.skipif(sys.platform != "linux" or os.geteuid() != 0, reason="mounting a tmpfs needs root on Linux")
def test_a_full_disk_fails_with_one_message_and_keeps_the_last_good_checkpoint(run_main, tiny_mnist: Path,
                                                                              tmp_path: Path) -> None:
    disk = tmp_path / f"disk_{uuid.uuid4().hex[:6]}"
    mount_tmpfs(disk, "1500k")  # two ~620 KB checkpoints fit, a third does not
    try:
        run = disk / "run"
        result = run_main("train", "model=mlp", "model.hidden_sizes=[64]", "trainer.max_epochs=3",
                     *tiny_cli_args(tiny_mnist), f"hydra.run.dir={run}")
        assert result.returncode == 1
        errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
        assert len(errors) == 1 and "Traceback" not in result.stderr
        assert errors[0].startswith(f"error: no space left in {run / 'checkpoints'} to write ")
        assert "it needs about" in errors[0] and "the files written before are kept" in errors[0]
        metrics = json.loads((run / "metrics.json").read_text())
        assert metrics["status"] == "failed" and metrics["error"].startswith("DiskFullError: no space left")
        assert "resume_with" not in metrics  # interrupted.ckpt did not fit either: no hint at a partial file
        last = torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)  # the epoch-1 state, whole
        assert last["global_step"] == 4
        assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["best-epoch01.ckpt", "last.ckpt"]
    finally:
        subprocess.run(["umount", str(disk)], check=False)


def test_figures_that_round_alike_are_given_in_bytes(tmp_path: Path) -> None:
    """'it needs about 1.7 MB, 1.7 MB free' read as if it fitted: the bytes that decided it are given instead."""
    error = DiskFullError(tmp_path / "model.pt2", 1_812_345, 1_790_112)
    assert str(error) == (f"no space left in {tmp_path} to write model.pt2: it needs about 1,812,345 bytes, 1,790,112 "
                          "bytes free; the files written before are kept")
    assert "about 2.0 KB, 1.0 KB free" in str(DiskFullError(tmp_path / "m", 2048, 1024))

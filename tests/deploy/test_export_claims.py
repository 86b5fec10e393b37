"""export into one file, by one process at a time and truthfully under signals: a bool option is a bool
(``overwrite=no`` is refused, not true), two exports into one file leave one file whose check is of it, a SIGTERM
says whether the file was already renamed into place (a check.json is always of the file beside it), and a
SIGKILLed export's temp file is removed by the next export there. Real processes and real signals."""

from __future__ import annotations

import hashlib
import json
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from modelforge.deploy.export import export
from modelforge.deploy.load import load_model
from modelforge.deploy.runtime import open_model
from tests.conftest import child_env, run_cli


def _sha1(path: Path) -> str:
    return hashlib.sha1(path.read_bytes()).hexdigest()


@pytest.mark.parametrize("value", ["no", "maybe", "1"])
def test_overwrite_that_is_not_a_bool_is_refused_and_the_file_stays(value: str, run_main, small_run: Path,
                                                                    tmp_path: Path) -> None:
    path = export(small_run, "pt2", tmp_path / "m.pt2", check=False)
    before = _sha1(path)
    refused = run_main("export", f"ckpt_path={small_run}", f"output={path}", f"overwrite={value}")
    assert refused.returncode == 2
    shown = repr(int(value)) if value.isdigit() else repr(value)
    assert refused.stderr == (f"error: overwrite: expected bool, got {'int' if value.isdigit() else 'str'} {shown}\n"
                              "  allowed: bool\n")
    assert _sha1(path) == before and sorted(p.name for p in tmp_path.iterdir()) == ["m.pt2"]


def test_every_bool_option_of_export_is_typed(small_run: Path, tmp_path: Path) -> None:
    from modelforge.errors import ConfigError

    for key in ("check", "dynamic_batch", "ema", "overwrite"):
        with pytest.raises(ConfigError, match=rf"^{key}: expected bool, got str 'no'"):
            export(small_run, "pt2", tmp_path / "m.pt2", **{key: "no"})
    assert list(tmp_path.iterdir()) == []


@pytest.mark.e2e
def test_two_exports_into_one_file_one_writes_the_other_says_why(small_run: Path, tmp_path: Path) -> None:
    target = tmp_path / "m.pt2"
    args = [sys.executable, "-m", "modelforge", "export", f"ckpt_path={small_run}", f"output={target}"]
    procs = [subprocess.Popen(args, cwd=tmp_path, env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for _ in range(2)]
    results = [(p.wait(timeout=300), *p.communicate()) for p in procs]
    codes = sorted(code for code, _, _ in results)
    assert codes[0] == 0 and codes[1] != 0, results
    _, _, err = next(r for r in results if r[0] != 0)
    # Refused while the other holds the file, or (started later than it finished) because the file is there.
    assert err.startswith((f"error: output: {target} is being written by another process (export pid ",
                           f"error: output: {target} exists (an earlier export)")), err
    assert err.count("\n") <= 2 and "Traceback" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.pt2", "m.pt2.check.json"]
    report = json.loads((tmp_path / "m.pt2.check.json").read_text())
    assert report["passed"] and report["file"] == str(target)
    images = torch.rand(4, 1, 28, 28)  # the check.json is of these weights: the file computes the run's model
    assert torch.allclose(open_model(target)(images), load_model(small_run)(images), atol=1e-5)


# A real export process held at one point, so that the signal lands there: after the rename of the file (before
# it is noted), or while the file is checked.
HELD = textwrap.dedent("""
    import sys, time
    import modelforge.deploy.export as exporting
    import modelforge.deploy.exporters as exporters
    from modelforge.files import atomic

    where = sys.argv.pop(1)

    def bytes_held_after_rename(path, data, committed=None):
        def held():
            print("renamed", flush=True)
            time.sleep(3)  # the SIGTERM comes now, between the rename and what the export notes of it
            committed()
        atomic.write_bytes(path, data, held)

    def images_held(*args, **kwargs):
        print("checking", flush=True)
        time.sleep(60)

    if where == "rename":
        exporters.write_bytes = bytes_held_after_rename
    else:
        exporting.check_images = images_held
    from modelforge.__main__ import main
    sys.exit(main(sys.argv[1:]))
""")


def _stopped_at(where: str, run: Path, target: Path, sig: int = signal.SIGTERM) -> tuple[int, str]:
    proc = subprocess.Popen([sys.executable, "-c", HELD, where, "export", f"ckpt_path={run}", f"output={target}",
                             "overwrite=true"], cwd=target.parent, env=child_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        for line in proc.stdout:
            if line in ("renamed\n", "checking\n"):
                break
        else:
            raise AssertionError(proc.communicate()[1][-3000:])
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    return proc.returncode, err


@pytest.mark.e2e
def test_sigterm_just_after_the_rename_says_the_file_was_written(small_run: Path, tmp_path: Path) -> None:
    target = tmp_path / "m.pt2"
    export(small_run, "pt2", target, check=True)  # an earlier export and its check
    code, err = _stopped_at("rename", small_run, target)
    assert code == 143, err
    assert err.strip() == (f"error: stopped by SIGTERM just after writing {target} (complete, not checked: no "
                           "m.pt2.check.json)")
    # The earlier check.json was of the file replaced: gone with it. No temp file, no lock file.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.pt2"]
    images = torch.rand(2, 1, 28, 28)
    assert torch.allclose(open_model(target)(images), load_model(small_run)(images), atol=1e-5)


@pytest.mark.e2e
@pytest.mark.slow  # 15 s here; test_claim.py's stop-during-a-rename is the quick test of the same reporting
def test_sigterm_while_checking_says_the_file_is_written_but_not_checked(small_run: Path, tmp_path: Path) -> None:
    target = tmp_path / "m.pt2"
    export(small_run, "pt2", target, check=True)
    code, err = _stopped_at("check", small_run, target)
    assert code == 143, err
    assert err.strip() == (f"error: stopped by SIGTERM while checking {target}; the file is written (complete) but "
                           "not checked: no m.pt2.check.json (check=false skips the check)")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.pt2"]


SLOW = textwrap.dedent("""
    import sys, time
    import modelforge.deploy.exporters as exporters
    from modelforge.files import atomic

    def slow_bytes(path, data, committed=None):
        def write(handle):
            handle.write(data[:4096])
            print("writing", flush=True)
            time.sleep(60)
        atomic.write_with(path, write, needed=len(data), committed=committed)

    exporters.write_bytes = slow_bytes
    from modelforge.__main__ import main
    sys.exit(main(sys.argv[1:]))
""")


@pytest.mark.e2e
@pytest.mark.slow  # two exports, 25 s here; test_claim.py's dead-writer tests are the quick ones of the same path
def test_a_sigkilled_exports_temp_file_is_removed_by_the_next_export_there(small_run: Path, tmp_path: Path) -> None:
    target = tmp_path / "m.pt2"
    proc = subprocess.Popen([sys.executable, "-c", SLOW, "export", f"ckpt_path={small_run}", f"output={target}"],
                            cwd=tmp_path, env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert "writing\n" in iter(proc.stdout.readline, ""), proc.communicate()[1][-3000:]
        proc.kill()  # SIGKILL: no handler runs, the temp file stays
        proc.wait(timeout=60)
    finally:
        proc.kill()
    left = sorted(p.name for p in tmp_path.iterdir())
    temp = next(name for name in left if name.endswith(".tmp"))
    assert temp.startswith(f".m.pt2.{proc.pid}.") and ".m.pt2.lock" in left  # the lock file: free (flock died with it)
    done = run_cli("export", f"ckpt_path={small_run}", f"output={target}", "check=false", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert f"note: removed 1 temp file of a writer that was killed: {temp}\n" in done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.pt2"]

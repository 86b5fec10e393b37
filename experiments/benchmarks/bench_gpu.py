"""Issue 13's GPU point in one command: what ran on the GPU and what it measured.

    python experiments/benchmarks/run.py --only gpu [--data-dir DIR]

Each row is one ``python -m modelforge train`` (or a sweep) with ``trainer.accelerator=gpu``; the
data sits on the GPU (the data module moves each split there once). A row that fails is recorded
with its exit code and the end of its error output, and the other rows still run: the point is to
see what breaks. Rows:

- the fast recipe (batch 32, one epoch, 1,719 steps) in ``32-true``; in ``bf16-mixed`` (the GPU
  default); with ``channels_last``; with ``compile``; with both;
- the fast recipe at batch 128 for one epoch (``optim.lr=2e-2``: 430 steps, 99.06-99.25% on 4 of 4
  seeds on a CPU) and at batch 512 for three epochs (fewer, larger steps: what a GPU wants; one
  epoch at 256 or 512 stays under 99%, see experiments/fast.md);
- the default recipe (``cnn``, three epochs, batch 128);
- ``trainer=ddp trainer.devices=1``: DDP over NCCL;
- a two-job sweep (``-m enc_sizes=[32,64],[16,32]``) on the GPU.

Before the rows, ``gpu_host_syncs.py`` counts the host syncs in steady-state training steps of the
fast recipe at batch 32 and at batch 512 (bf16-mixed): each makes the host wait for the GPU.

``--accelerator cpu --train-batches 2`` runs the same rows on a CPU, briefly: a check of this
script, not a figure.
"""

from __future__ import annotations

import csv
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

FAST = ["experiment=fast"]
ROWS: dict[str, list[str]] = {
    "fast recipe, 32-true": [*FAST, "trainer.precision=32-true"],
    "fast recipe, bf16-mixed": [*FAST, "trainer.precision=bf16-mixed"],
    "fast recipe, bf16-mixed, channels_last": [*FAST, "trainer.precision=bf16-mixed", "channels_last=true"],
    "fast recipe, bf16-mixed, compile": [*FAST, "trainer.precision=bf16-mixed", "compile=true"],
    "fast recipe, bf16-mixed, channels_last + compile": [*FAST, "trainer.precision=bf16-mixed", "channels_last=true",
                                                         "compile=true"],
    "fast recipe at batch 128, 1 epoch, bf16-mixed": [*FAST, "data.batch_size=128", "optim.lr=2e-2",
                                                      "trainer.precision=bf16-mixed"],
    "fast recipe at batch 512, 3 epochs, bf16-mixed": [*FAST, "data.batch_size=512", "trainer.max_epochs=3",
                                                       "optim.lr=3e-2", "trainer.precision=bf16-mixed"],
    "default recipe (cnn, 3 epochs), bf16-mixed": ["trainer.precision=bf16-mixed"],
    "fast recipe, trainer=ddp trainer.devices=1 (NCCL)": [*FAST, "trainer=ddp", "trainer.devices=1"],
    "sweep of 2 jobs (-m), fast recipe": ["-m", *FAST, "enc_sizes=[32,64],[16,32]"],
}


SYNC_CHECKS: dict[str, list[str]] = {
    "host syncs in training steps, fast recipe, bf16-mixed": ["trainer.precision=bf16-mixed"],
    "host syncs in training steps, batch 512, bf16-mixed": ["data.batch_size=512", "trainer.precision=bf16-mixed"],
}


def count_host_syncs(data_dir: str | None, env: Mapping[str, str]) -> list[dict]:
    """Per ``SYNC_CHECKS`` entry: the synchronizing operations torch reported in its training steps."""
    checks = []
    for name, overrides in SYNC_CHECKS.items():
        cmd = [sys.executable, str(Path(__file__).with_name("gpu_host_syncs.py")),
               *([f"--data-dir={data_dir}"] if data_dir else []), *overrides]
        check, result = _run(name, cmd, " ".join(["python", *cmd[1:]]), env)
        lines = result.stdout.strip().splitlines()
        if result.returncode == 0 and lines:
            check.update(json.loads(lines[-1]))
        elif result.returncode == 0:
            check["error"] = "printed nothing: " + result.stderr.strip()[-1500:]
        checks.append(check)
        print(f"  {name}: exit {check['exit']}, " + (f"{check['syncs']} syncs in {check['steps_checked']} steps"
                                                     if "syncs" in check else check.get("skipped", "see error")),
              flush=True)
    return checks


def measure(data_dir: str | None, env: Mapping[str, str], accelerator: str = "gpu",
            train_batches: int | None = None) -> dict:
    """Run every row once (in ``env``); per row its command, exit code, wall time and the run's figures."""
    work = Path(tempfile.mkdtemp(prefix="mf_bench_gpu_"))
    host_syncs = count_host_syncs(data_dir, env)
    common = [f"trainer.accelerator={accelerator}", *([f"data.data_dir={data_dir}"] if data_dir else []),
              *([f"trainer.limit_train_batches={train_batches}"] if train_batches else [])]
    rows = []
    for i, (name, overrides) in enumerate(ROWS.items()):
        sweep = overrides[0] == "-m"
        target = work / str(i)
        where = f"hydra.sweep.dir={target}" if sweep else f"hydra.run.dir={target}"
        cmd = [sys.executable, "-m", "modelforge", "train", *overrides, *common, where]
        row, result = _run(name, cmd, " ".join(["python", *cmd[1:-1]]), env)  # shown without the temp dir
        if result.returncode == 0 and sweep:
            row["jobs"] = [_job(r) for r in csv.DictReader((target / "summary.csv").open())]
        elif result.returncode == 0:
            row.update(_figures(json.loads((target / "metrics.json").read_text())))
        rows.append(row)
        print(f"  {name}: exit {row['exit']}, {row['command_s']:.1f} s"
              + (f", test/acc {row['test_acc']:.4f}, train {row['train_time_s']:.2f} s" if "test_acc" in row else ""),
              flush=True)
    return {"accelerator": accelerator, "device": _device(), "host_syncs": host_syncs, "rows": rows}


def _run(name: str, cmd: list[str], shown: str, env: Mapping[str, str]) -> tuple[dict, subprocess.CompletedProcess]:
    """Run ``cmd``; its row: name, command as shown, exit code, wall time, and the error's end if it failed."""
    start = time.perf_counter()
    result = subprocess.run(cmd, capture_output=True, text=True, env=dict(env))
    row = {"name": name, "command": shown, "exit": result.returncode, "command_s": round(time.perf_counter() - start, 2)}
    if result.returncode != 0:
        row["error"] = result.stderr.strip()[-1500:]
    return row, result


def _figures(metrics: Mapping) -> dict:
    return {"test_acc": metrics["test/acc"], "train_time_s": metrics["train_time_s"], "epochs": metrics.get("epochs")}


def _job(row: Mapping[str, str]) -> dict:
    return {"overrides": row.get("overrides"), "status": row.get("status"), "test_acc": row.get("test/acc"),
            "train_time_s": row.get("train_time_s")}


def _device() -> str:
    import torch

    if not torch.cuda.is_available():
        return "no CUDA device"
    return f"{torch.cuda.get_device_name(0)}, torch {torch.__version__}, CUDA {torch.version.cuda}"

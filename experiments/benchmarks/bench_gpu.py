"""The GPU session in one command (issue 32): every row its own process under its own time limit.

    python experiments/benchmarks/run.py --only gpu [--data-dir DIR]          # about 7 minutes on an H100
    python experiments/benchmarks/run.py --only gpu --gpu-rows speedrun,main  # some rows (names below)
    python experiments/benchmarks/run.py --only gpu --accelerator cpu --train-batches 2   # a check of the plumbing

A row that fails or runs past its limit is recorded (exit code, the end of its error output, or "timed out") and
the rows after it still run: one hang cannot hide the rest. Rows (``--gpu-rows`` takes the group names):

- ``loop``: the fast recipe (cnn [32,64], batch 32, one epoch = 1,719 steps, AdamW + one-cycle, label smoothing)
  as a hand-written loop (raw_loop.py, data on the GPU), as ``modelforge train`` eagerly, and with the training
  step captured in a CUDA graph (``cuda_graph=true``), in 32-true and in bf16-mixed; then the same three at batch
  512 for 3 epochs (``optim.lr=3e-2``);
- ``compile``: the fast recipe with ``compile=true`` (bf16-mixed): its graphs and compile seconds;
- ``speedrun``: ``experiment=speedrun`` (time to 99%) on seeds 0-4;
- ``main``: the README's main job ``train model=cnn enc_sizes=[32,64]``, with the run's own breakdown of its time
  (``timings`` in metrics.json: before train(), prepare, fit, test) and the whole command's;
- ``ddp``: ``trainer=ddp trainer.devices=1`` (NCCL); ``sweep``: a 2-job sweep (``-m``);
- ``syncs``: the host syncs torch reports in steady-state training steps (gpu_host_syncs.py), eager and captured.

Each row records its command, exit code, wall time, and the run's figures (test/acc, train_time_s, timings,
compile, device); the JSON goes to results/gpu.json and RESULTS.md's GPU section is rebuilt from it, with the
ratios the issue asks for (eager / raw, captured / raw) computed from rows of the same run.
"""

from __future__ import annotations

import csv
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
FAST = ["experiment=fast"]
BATCH_512 = ["data.batch_size=512", "trainer.max_epochs=3", "optim.lr=3e-2"]


@dataclass(frozen=True)
class Row:
    name: str
    group: str
    args: Sequence[str]  # after `python`: a script, or `-m modelforge train ...`
    timeout_s: float
    kind: str = "train"  # train (a run dir), sweep (a sweep dir), raw (one JSON line), syncs (one JSON line)
    tags: Mapping[str, str] = field(default_factory=dict)  # recipe, side, precision: what a ratio pairs


def _train(*overrides: str) -> list[str]:
    return ["-m", "modelforge", "train", *overrides]


def _raw(*options: str) -> list[str]:
    return [str(HERE / "raw_loop.py"), "--device", "cuda", *options]


def rows() -> list[Row]:
    table: list[Row] = []
    for recipe, extra, raw_extra in (("batch 32, 1 epoch", [], []),
                                     ("batch 512, 3 epochs", BATCH_512, ["--batch-size", "512", "--epochs", "3",
                                                                         "--lr", "3e-2"])):
        for precision in ("32-true", "bf16-mixed"):
            tags = {"recipe": recipe, "precision": precision}
            table += [
                Row(f"raw loop, {recipe}, {precision}", "loop", _raw("--precision", precision, *raw_extra), 90,
                    "raw", {**tags, "side": "raw"}),
                Row(f"modelforge eager, {recipe}, {precision}", "loop",
                    _train(*FAST, *extra, f"trainer.precision={precision}"), 120, tags={**tags, "side": "eager"}),
                Row(f"modelforge cuda_graph, {recipe}, {precision}", "loop",
                    # a replayed step keeps the momentum it was captured with: one-cycle moves only the lr here
                    _train(*FAST, *extra, f"trainer.precision={precision}", "cuda_graph=true",
                           "sched.cycle_momentum=false"), 120,
                    tags={**tags, "side": "captured"}),
            ]
    table.append(Row("fast recipe, compile=true, bf16-mixed", "compile",
                     _train(*FAST, "trainer.precision=bf16-mixed", "compile=true"), 150))
    table += [Row(f"experiment=speedrun seed={s}", "speedrun", _train("experiment=speedrun", f"seed={s}"), 60,
                  tags={"seed": str(s)}) for s in range(5)]
    table.append(Row("README main job: train model=cnn enc_sizes=[32,64]", "main",
                     _train("model=cnn", "enc_sizes=[32,64]"), 120))
    table.append(Row("fast recipe, trainer=ddp trainer.devices=1 (NCCL)", "ddp",
                     _train(*FAST, "trainer=ddp", "trainer.devices=1"), 120))
    table.append(Row("sweep of 2 jobs (-m), fast recipe", "sweep", _train("-m", *FAST, "enc_sizes=[32,64],[16,32]"),
                     180, "sweep"))
    for name, overrides in (("eager, fast recipe, bf16-mixed", ["trainer.precision=bf16-mixed"]),
                            ("cuda_graph, fast recipe, bf16-mixed", ["trainer.precision=bf16-mixed", "cuda_graph=true",
                                                                     "sched.cycle_momentum=false"]),
                            ("eager, batch 512, bf16-mixed", ["data.batch_size=512", "trainer.precision=bf16-mixed"])):
        table.append(Row(f"host syncs in training steps, {name}", "syncs",
                         [str(HERE / "gpu_host_syncs.py"), *overrides], 90, "syncs"))
    return table


def measure(data_dir: str | None, env: Mapping[str, str], accelerator: str = "gpu", train_batches: int | None = None,
            groups: Sequence[str] | None = None) -> dict:
    """Run the rows of ``groups`` (all by default) once each, in ``env``; the figures of each, and the ratios."""
    work = Path(tempfile.mkdtemp(prefix="mf_bench_gpu_"))
    # --train-batches (the CPU check of this script): that many training batches, and as many of validation and test
    limits = ("trainer.limit_train_batches", "trainer.limit_val_batches", "trainer.limit_test_batches")
    common = [f"trainer.accelerator={accelerator}", *([f"data.data_dir={data_dir}"] if data_dir else []),
              *([f"{key}={train_batches}" for key in limits] if train_batches else [])]
    results = []
    for i, row in enumerate(r for r in rows() if groups is None or r.group in groups):
        results.append(_run_row(row, work / str(i), common, data_dir, accelerator, train_batches, env))
        shown = results[-1]
        print(f"  {row.name}: exit {shown['exit']}, {shown['command_s']:.1f} s"
              + (f", test/acc {shown['test_acc']:.4f}, train {shown['train_time_s']:.2f} s" if "test_acc" in shown
                 else ""), flush=True)
    return {"accelerator": accelerator, "device": _device(), "rows": results, "ratios": ratios(results),
            "speedrun": speedrun_summary(results)}


def _run_row(row: Row, target: Path, common: list[str], data_dir: str | None, accelerator: str,
             train_batches: int | None, env: Mapping[str, str]) -> dict:
    if row.kind in ("train", "sweep"):
        where = f"hydra.sweep.dir={target}" if row.kind == "sweep" else f"hydra.run.dir={target}"
        args = [*row.args, *common, where]
    elif row.kind == "raw":
        args = [*row.args, *([f"--data-dir={data_dir}"] if data_dir else []),
                *([f"--limit-{split}-batches={train_batches}" for split in ("train", "val", "test")]
                  if train_batches else [])]
        args[args.index("cuda")] = "cuda" if accelerator == "gpu" else "cpu"
    else:  # syncs: gpu_host_syncs.py takes train overrides after its options
        args = [row.args[0], *([f"--data-dir={data_dir}"] if data_dir else []), *row.args[1:]]
    shown = " ".join(["python", *(a for a in args if not a.startswith(("hydra.run.dir=", "hydra.sweep.dir=")))])
    record: dict = {"name": row.name, "group": row.group, "command": shown, **row.tags}
    start = time.perf_counter()
    try:
        result = subprocess.run([sys.executable, *args], capture_output=True, text=True, env=dict(env),
                                timeout=row.timeout_s)
    except subprocess.TimeoutExpired as exc:
        tail = (exc.stderr or b"")[-1500:]
        record.update(exit="timeout", command_s=round(time.perf_counter() - start, 1),
                      error=f"timed out after {row.timeout_s:.0f} s: "
                            + (tail.decode(errors="replace") if isinstance(tail, bytes) else tail))
        return record
    record.update(exit=result.returncode, command_s=round(time.perf_counter() - start, 2))
    if result.returncode != 0:
        record["error"] = result.stderr.strip()[-1500:]
        return record
    if row.kind == "sweep":
        record["jobs"] = [{"overrides": j.get("overrides"), "status": j.get("status"), "test_acc": j.get("test/acc"),
                           "train_time_s": j.get("train_time_s")} for j in csv.DictReader((target / "summary.csv").open())]
    elif row.kind == "train":
        metrics = json.loads((target / "metrics.json").read_text())
        record.update(test_acc=metrics["test/acc"], train_time_s=metrics["train_time_s"],
                      **{k: metrics[k] for k in ("timings", "compile", "device", "global_step") if k in metrics})
        log = (target / "train.log").read_text() if (target / "train.log").exists() else ""
        record["warnings"] = [line for line in (result.stderr + log).splitlines() if "Warning" in line][:10]
    else:
        lines = result.stdout.strip().splitlines()
        figures = json.loads(lines[-1]) if lines else {"error": "printed nothing"}
        if row.kind == "raw":
            record.update(test_acc=figures["test/acc"], train_time_s=round(figures["fit_s"], 2))
        else:
            record.update(figures)
    return record


def ratios(results: Sequence[dict]) -> list[dict]:
    """Per recipe and precision: eager and captured train_time_s over the raw loop's fit time, same run."""
    out = []
    by = {(r.get("recipe"), r.get("precision"), r.get("side")): r for r in results if "train_time_s" in r}
    for recipe, precision in sorted({(k[0], k[1]) for k in by if k[0]}):
        raw = by.get((recipe, precision, "raw"))
        for side in ("eager", "captured"):
            run = by.get((recipe, precision, side))
            if raw and run:
                out.append({"recipe": recipe, "precision": precision, "side": side,
                            "ratio_to_raw": round(run["train_time_s"] / raw["train_time_s"], 3),
                            "train_time_s": run["train_time_s"], "raw_s": raw["train_time_s"]})
    return out


def speedrun_summary(results: Sequence[dict]) -> dict:
    runs = [r for r in results if r.get("group") == "speedrun" and "test_acc" in r]
    return {"seeds": len(runs), "reached_0.990": sum(r["test_acc"] >= 0.990 for r in runs),
            "train_time_s": sorted(r["train_time_s"] for r in runs), "test_acc": [r["test_acc"] for r in runs]}


def _device() -> str:
    import torch

    if not torch.cuda.is_available():
        return "no CUDA device"
    return f"{torch.cuda.get_device_name(0)}, torch {torch.__version__}, CUDA {torch.version.cuda}"

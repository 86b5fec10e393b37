"""The GPU session in one command, built for scarce GPU time: rows in order of value, an overall deadline it keeps,
and every row's result in ``results/gpu.json`` and RESULTS.md as soon as it finishes.

    python experiments/benchmarks/run.py --only gpu [--data-dir DIR]             # at most 7 minutes (the deadline)
    python experiments/benchmarks/run.py --only gpu --gpu-deadline-s 300          # another deadline
    python experiments/benchmarks/run.py --only gpu --gpu-rows headline,speedrun  # some row groups (names below)
    python experiments/benchmarks/run.py --only gpu --accelerator cpu             # the plumbing, on a CPU

Each row is a process group of its own, under its own time limit clipped to the time left: a row that hangs is
recorded as timed out and the next one runs; a row that cannot start before the deadline is recorded as not run.
``gpu.json`` lists every planned row from the start (pending, running, then its result) and is replaced atomically
after each change, RESULTS.md with it: a session killed at any moment (SIGTERM: the row in flight is stopped and
recorded as interrupted, exit 143; SIGKILL: it stays "running", and its process dies with the session) keeps every
row it finished. Rows, most valuable first (``--gpu-rows`` takes the group names):

1. ``headline``: the fast recipe (cnn [32,64], batch 32, one epoch = 1,719 steps, AdamW + one-cycle) in bf16-mixed
   as a hand-written loop (raw_loop.py), as ``modelforge train`` eagerly, and with ``cuda_graph=true``;
2. ``correctness``: eager against captured, dropout 0, 32-true, over ``--pair-steps`` steps: steps, test loss and
   the largest weight difference of the two last.ckpt;
3. ``speedrun``: ``experiment=speedrun`` on seeds 0-4 (how many reach 0.990, and train_time_s);
4. ``compile``: the fast recipe with ``compile=true data.drop_last=true`` (bf16-mixed): its graphs and seconds;
5. ``resume``: a captured run of ``--pair-steps`` steps, resumed for a second epoch: Adam's step count in each
   last.ckpt equals the run's global_step;
6. ``tests``: the GPU tests of tests/train (:data:`GPU_TESTS`), under their own limit;
7. then ``loop`` (the headline's three in 32-true), ``clip`` (eager against captured with value clipping), ``sgd``
   (eager against captured, fused SGD), ``swa`` (refused: exit 2), ``ema`` (captured with callbacks=[ema]),
   ``batch512`` (the headline's three at batch 512, 3 epochs), ``syncs`` (host syncs in steady-state steps,
   gpu_host_syncs.py), ``main`` (the README's main job, with its time breakdown), ``ddp`` (one GPU over NCCL),
   ``sweep`` (2 jobs, ``-m``), ``tests_all`` (all of tests/train).

``--accelerator cpu`` (the CPU form) runs one row of each kind (12 processes: headline, correctness, speedrun seed
0, compile on aot_eager, resume, tests, swa, sweep) with 2 batches per stage (``--train-batches``): a check of the
plumbing, not a figure; the other rows are recorded as not run, saying why.
"""

from __future__ import annotations

import argparse
import csv
import importlib.util
import json
import re
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(HERE))  # its sibling scripts
from gpu_session import Deadline, Finished, SessionRecord, run_command, run_rows  # noqa: E402

DEADLINE_S = 420.0  # the whole session: 7 minutes, inside a 10-minute command limit
PAIR_STEPS = 200
FAST = ("experiment=fast",)
SCHEDULE = ("sched.cycle_momentum=false",)  # one-cycle moves only the lr: what a replay can follow
EXACT = ("model.dropout=0.0", "trainer.precision=32-true", "data.drop_last=true", *SCHEDULE)  # eager vs captured
BATCH_512 = ("data.batch_size=512", "trainer.max_epochs=3", "optim.lr=3e-2")
# A pair of runs matches when the captured one is the eager one up to rounding (a frozen lr, a lost step or a
# clip that zeroes the gradients is off by orders of magnitude more).
PAIR_TOLERANCE = {"weights_max_abs_diff": 1e-2, "test_loss_rel_diff": 1e-2}
# The tests that need CUDA (each skips without it), by id: a -k expression also picks every id that says cuda_graph.
GPU_TESTS = ("tests/train/test_captured_step.py::test_on_a_gpu_the_captured_run_trains_as_the_eager_run",
             "tests/train/test_captured_step.py::"
             "test_the_optimizer_step_count_is_the_global_step_after_a_save_and_a_resume[gpu]",
             "tests/train/test_divergence.py::test_on_a_single_gpu_the_guard_defers_its_check_by_one_step")


@dataclass(frozen=True)
class Row:
    name: str
    group: str
    kind: str  # raw, train, pair, resume, refusal, sweep, syncs, tests
    args: Sequence[str]  # raw/syncs: the script's options; train kinds: the overrides; tests: pytest's arguments
    timeout_s: float  # per process
    tags: Mapping[str, str] = field(default_factory=dict)  # recipe, precision, side: what a ratio pairs
    other: Sequence[str] = ()  # pair: the captured side's extra overrides; refusal: the expected text; tests: -n N
    gpu_only: bool = False  # needs CUDA itself (NCCL, the sync debug mode): not run in the CPU form
    cpu_form: bool = True  # run in the CPU form (one row of each kind of plumbing)


def rows(pair_steps: int = PAIR_STEPS) -> list[Row]:
    steps = (f"trainer.limit_train_batches={pair_steps}", "trainer.max_epochs=1")
    table = _trio("headline", "batch 32, 1 epoch", "bf16-mixed", [], [])
    table.append(Row(f"correctness: eager vs cuda_graph, dropout 0, 32-true, {pair_steps} steps", "correctness",
                     "pair", [*FAST, *EXACT, *steps], 90, other=["cuda_graph=true"]))
    table += [Row(f"experiment=speedrun seed={s}", "speedrun", "train", ["experiment=speedrun", f"seed={s}"], 45,
                  tags={"seed": str(s)}, cpu_form=s == 0) for s in range(5)]
    table.append(Row("fast recipe, compile=true, data.drop_last=true, bf16-mixed", "compile", "train",
                     [*FAST, "trainer.precision=bf16-mixed", "compile=true", "data.drop_last=true"], 150))
    table.append(Row(f"resume: cuda_graph, {pair_steps} steps, then a second epoch; Adam's step count = global_step",
                     "resume", "resume", [*FAST, "cuda_graph=true", *SCHEDULE, f"trainer.limit_train_batches={pair_steps}"],
                     90))
    table.append(Row("the GPU tests of tests/train (GPU_TESTS)", "tests", "tests", GPU_TESTS, 180))
    table += _trio("loop", "batch 32, 1 epoch", "32-true", [], [], cpu_form=False)
    table.append(Row(f"clip: eager vs cuda_graph, gradient_clip_algorithm=value 0.05, {pair_steps} steps", "clip",
                     "pair", [*FAST, *EXACT, *steps, "trainer.gradient_clip_algorithm=value",
                              "trainer.gradient_clip_val=0.05"], 90, other=["cuda_graph=true"], cpu_form=False))
    table.append(Row(f"sgd: eager vs cuda_graph (fused SGD, tensor lr), {pair_steps} steps", "sgd", "pair",
                     [*FAST, *EXACT, *steps, "optim=sgd"], 90, other=["cuda_graph=true"], cpu_form=False))
    table.append(Row("swa: callbacks=[swa] cuda_graph=true is refused", "swa", "refusal",
                     [*FAST, "cuda_graph=true", *SCHEDULE, "callbacks=[swa]"], 60,
                     other=["error: cuda_graph: callbacks.swa (stochastic weight averaging)"]))
    table.append(Row("ema: cuda_graph=true callbacks=[ema] (decay 0.99)", "ema", "train",
                     [*FAST, "cuda_graph=true", *SCHEDULE, "callbacks=[ema]", "callbacks.ema.decay=0.99"], 90,
                     cpu_form=False))
    table += _trio("batch512", "batch 512, 3 epochs", "bf16-mixed", list(BATCH_512),
                   ["--batch-size", "512", "--epochs", "3", "--lr", "3e-2"], cpu_form=False)
    for name, overrides in (("eager, fast recipe, bf16-mixed", ["trainer.precision=bf16-mixed"]),
                            ("cuda_graph, fast recipe, bf16-mixed", ["trainer.precision=bf16-mixed", "cuda_graph=true",
                                                                     *SCHEDULE])):
        table.append(Row(f"host syncs in training steps, {name}", "syncs", "syncs",
                         [str(HERE / "gpu_host_syncs.py"), *overrides], 60, gpu_only=True))
    table.append(Row("README main job: train model=cnn enc_sizes=[32,64]", "main", "train",
                     ["model=cnn", "enc_sizes=[32,64]"], 120, cpu_form=False))
    table.append(Row("fast recipe, trainer=ddp trainer.devices=1 (NCCL)", "ddp", "train",
                     [*FAST, "trainer=ddp", "trainer.devices=1"], 90, gpu_only=True))
    table.append(Row("sweep of 2 jobs (-m), fast recipe", "sweep", "sweep", ["-m", *FAST, "enc_sizes=[32,64],[16,32]"],
                     150))
    table.append(Row("all of tests/train", "tests_all", "tests", ("tests/train",), 300, other=["-n", "4"],
                     gpu_only=True))
    return table


def _trio(group: str, recipe: str, precision: str, extra: list[str], raw_extra: list[str],
          cpu_form: bool = True) -> list[Row]:
    tags = {"recipe": recipe, "precision": precision}
    return [
        Row(f"raw loop, {recipe}, {precision}", group, "raw",
            [str(HERE / "raw_loop.py"), "--precision", precision, *raw_extra], 60, {**tags, "side": "raw"},
            cpu_form=cpu_form),
        Row(f"modelforge eager, {recipe}, {precision}", group, "train",
            [*FAST, *extra, f"trainer.precision={precision}"], 90, {**tags, "side": "eager"}, cpu_form=cpu_form),
        Row(f"modelforge cuda_graph, {recipe}, {precision}", group, "train",
            [*FAST, *extra, f"trainer.precision={precision}", "cuda_graph=true", *SCHEDULE], 90,
            {**tags, "side": "captured"}, cpu_form=cpu_form),
    ]


@dataclass
class Setting:
    """What every row of this session shares."""

    accelerator: str
    data_dir: str | None
    train_batches: int | None
    env: Mapping[str, str]
    work: Path
    deadline: Deadline

    @property
    def cpu_form(self) -> bool:
        return self.accelerator != "gpu"

    def overrides(self, row: Row) -> list[str]:
        limits = [f"trainer.limit_{split}_batches={self.train_batches}" for split in ("train", "val", "test")] \
            if self.train_batches else []
        # inductor's C++ takes ~40 s on 2 cores: the CPU form checks the compile row's plumbing with aot_eager
        quick = ["compile_backend=aot_eager"] if self.cpu_form and "compile=true" in row.args else []
        return [f"trainer.accelerator={self.accelerator}", *([f"data.data_dir={self.data_dir}"] if self.data_dir else []),
                *quick, *limits]


def measure(results_dir: Path, env: Mapping[str, str], accelerator: str = "gpu", data_dir: str | None = None,
            train_batches: int | None = None, groups: Sequence[str] | None = None, deadline_s: float = DEADLINE_S,
            pair_steps: int = PAIR_STEPS, header: Mapping[str, Any] = (),
            markdown: Path | None = None) -> dict[str, Any]:
    """Run the rows of ``groups`` (all by default) in order until ``deadline_s``; ``results_dir/gpu.json`` (and
    ``markdown``, rebuilt from the results folder) hold every row's result from the moment it finishes."""
    deadline = Deadline(deadline_s)
    cpu_form = accelerator != "gpu"
    if cpu_form and train_batches is None:
        train_batches, pair_steps = 2, 2
    setting = Setting(accelerator, data_dir, train_batches, env, Path(tempfile.mkdtemp(prefix="mf_bench_gpu_")),
                      deadline)
    chosen = [r for r in rows(pair_steps) if groups is None or r.group in groups]
    planned = [{"name": r.name, "group": r.group, "kind": r.kind, "status": "pending", **r.tags} for r in chosen]
    started = time.time()

    def rebuild() -> None:
        if markdown is not None:
            from results_md import write_results

            write_results(results_dir, markdown)

    record = SessionRecord(results_dir / "gpu.json", {
        "mode": "full", "note": "", "commit": "", **dict(header), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "seconds": 0.0, "accelerator": accelerator, "device": _device(), "deadline_s": deadline_s,
        "work_dir": str(setting.work), "form": "cpu plumbing" if cpu_form else "gpu",
    }, planned, lambda rs: {"ratios": ratios(rs), "speedrun": speedrun_summary(rs),
                            "seconds": round(time.time() - started, 1)}, rebuild)

    def skip(index: int) -> str | None:
        row = chosen[index]
        if cpu_form and row.gpu_only:
            return "needs a CUDA GPU"
        if cpu_form and not row.cpu_form:
            return "the CPU form runs one row of each kind (the plumbing)"
        return None

    def run_one(index: int) -> dict[str, Any]:
        row = chosen[index]
        try:
            return KINDS[row.kind](row, setting.work / str(index), setting, lambda pid: record.update(index, pid=pid))
        except Exception as exc:  # reading a row's figures: one broken row must not end the session
            return {"status": "failed", "exit": "error", "error": f"{type(exc).__name__}: {exc}"}

    run_rows(record, deadline, run_one, skip)
    return record.data


def _limit(row: Row, setting: Setting) -> float:
    return setting.deadline.limit(row.timeout_s)


def _python(args: Sequence[str]) -> list[str]:
    return [sys.executable, *args]


def _train(row: Row, target: Path, setting: Setting, extra: Sequence[str] = (), on_start: Any = None,
           sweep: bool = False) -> tuple[Finished, list[str]]:
    where = f"hydra.sweep.dir={target}" if sweep else f"hydra.run.dir={target}"
    argv = ["-m", "modelforge", "train", *row.args, *extra, *setting.overrides(row)]
    finished = run_command(_python([*argv, where]), setting.env, _limit(row, setting), target.with_suffix(".logs"),
                           on_start or (lambda pid: None), cwd=REPO)
    return finished, ["python", *argv]


def _outcome(finished: Finished, command: list[str]) -> dict[str, Any]:
    record: dict[str, Any] = {"command": " ".join(command), "command_s": finished.seconds, "limit_s": finished.limit_s}
    if finished.timed_out:
        return {**record, "status": "timeout", "exit": "timeout",
                "error": f"timed out after {finished.limit_s:.0f} s: {finished.error_tail()}"}
    record.update(exit=finished.exit, status="done" if finished.exit == 0 else "failed")
    if finished.exit != 0:
        record["error"] = finished.error_tail()
    return record


def _run_figures(target: Path, stderr: str) -> dict[str, Any]:
    metrics = json.loads((target / "metrics.json").read_text())
    log = (target / "train.log").read_text() if (target / "train.log").exists() else ""
    return {"test_acc": metrics.get("test/acc"), "test_loss": metrics.get("test/loss"),
            "train_time_s": metrics.get("train_time_s"),
            **{k: metrics[k] for k in ("timings", "compile", "device", "global_step") if k in metrics},
            "warnings": [line for line in (stderr + log).splitlines() if "Warning" in line][:10]}


def run_train(row: Row, target: Path, setting: Setting, on_start: Any) -> dict[str, Any]:
    finished, command = _train(row, target, setting, on_start=on_start)
    outcome = _outcome(finished, command)
    return {**outcome, **(_run_figures(target, finished.stderr) if outcome["status"] == "done" else {})}


def run_pair(row: Row, target: Path, setting: Setting, on_start: Any) -> dict[str, Any]:
    """Two runs, the second with ``row.other``: the same steps, test loss and weights up to rounding?"""
    sides = {}
    for side, extra in (("eager", ()), ("captured", row.other)):
        finished, command = _train(row, target / side, setting, extra, on_start)
        outcome = _outcome(finished, command)
        if outcome["status"] != "done":
            return {**outcome, "error": f"the {side} run: {outcome.get('error', '')}"}
        sides[side] = {**_run_figures(target / side, finished.stderr), "command_s": finished.seconds,
                       "command": outcome["command"]}
    eager, captured = sides["eager"], sides["captured"]
    diff = _weights_max_abs_diff(target / "eager", target / "captured")
    loss_rel = abs(captured["test_loss"] - eager["test_loss"]) / max(abs(eager["test_loss"]), 1e-12)
    match = (eager["global_step"] == captured["global_step"] and diff <= PAIR_TOLERANCE["weights_max_abs_diff"]
             and loss_rel <= PAIR_TOLERANCE["test_loss_rel_diff"])
    return {"status": "done" if match else "failed", "exit": 0 if match else "mismatch", "match": match,
            "command": captured["command"], "command_s": round(eager["command_s"] + captured["command_s"], 2),
            "global_step": [eager["global_step"], captured["global_step"]], "weights_max_abs_diff": diff,
            "test_loss_rel_diff": loss_rel, "tolerance": PAIR_TOLERANCE,
            "test_acc": captured["test_acc"], "eager": eager, "captured": captured}


def _weights_max_abs_diff(a: Path, b: Path) -> float:
    import torch

    first, second = (torch.load(run / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)["state_dict"]
                     for run in (a, b))
    return max((float((first[k].float() - second[k].float()).abs().max()) for k in first
                if first[k].is_floating_point() and first[k].numel()), default=0.0)


def run_resume(row: Row, target: Path, setting: Setting, on_start: Any) -> dict[str, Any]:
    """A run of one epoch, resumed for a second: each last.ckpt's Adam step counts equal its global_step."""
    checks = []
    for name, extra in (("first", ["trainer.max_epochs=1"]),
                        ("resumed", ["trainer.max_epochs=2", f"ckpt_path={target / 'first' / 'checkpoints' / 'last.ckpt'}"])):
        finished, command = _train(row, target / name, setting, extra, on_start)
        outcome = _outcome(finished, command)
        if outcome["status"] != "done":
            return {**outcome, "error": f"the {name} run: {outcome.get('error', '')}"}
        checks.append({"run": name, **_step_counts(target / name)})
    ok = all(c["global_step"] > 0 and c["optimizer_steps"] == [c["global_step"]] for c in checks)
    return {"status": "done" if ok else "failed", "exit": 0 if ok else "mismatch", "command": outcome["command"],
            "command_s": finished.seconds, "steps": checks}


def _step_counts(run: Path) -> dict[str, Any]:
    import torch

    metrics = json.loads((run / "metrics.json").read_text())
    saved = torch.load(run / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    counts = sorted({int(s["step"]) for s in saved["optimizer_states"][0]["state"].values() if "step" in s})
    return {"global_step": metrics.get("global_step"), "optimizer_steps": counts, "test_acc": metrics.get("test/acc")}


def run_refusal(row: Row, target: Path, setting: Setting, on_start: Any) -> dict[str, Any]:
    finished, command = _train(row, target, setting, on_start=on_start)
    outcome = _outcome(finished, command)
    said = [line for line in finished.stderr.splitlines() if line.startswith("error:")]
    ok = finished.exit == 2 and any(row.other[0] in line for line in said) and "Traceback" not in finished.stderr
    return {**outcome, "status": "done" if ok else "failed", "refused": said, "expected": row.other[0],
            "error": "" if ok else finished.error_tail()}


def run_sweep(row: Row, target: Path, setting: Setting, on_start: Any) -> dict[str, Any]:
    finished, command = _train(row, target, setting, on_start=on_start, sweep=True)
    outcome = _outcome(finished, command)
    if outcome["status"] == "done":
        outcome["jobs"] = [{"overrides": j.get("overrides"), "status": j.get("status"), "test_acc": j.get("test/acc"),
                            "train_time_s": j.get("train_time_s")} for j in csv.DictReader((target / "summary.csv").open())]
    return outcome


def run_script(row: Row, target: Path, setting: Setting, on_start: Any) -> dict[str, Any]:
    """raw_loop.py or gpu_host_syncs.py: one JSON line on stdout."""
    script, options = row.args[0], list(row.args[1:])
    data = [f"--data-dir={setting.data_dir}"] if setting.data_dir else []
    if row.kind == "raw":
        limits = [f"--limit-{s}-batches={setting.train_batches}" for s in ("train", "val", "test")] \
            if setting.train_batches else []
        argv = [script, "--device", "cuda" if setting.accelerator == "gpu" else "cpu", *options, *data, *limits]
    else:  # gpu_host_syncs.py takes train overrides after its options
        argv = [script, *data, *options]
    finished = run_command(_python(argv), setting.env, _limit(row, setting), target.with_suffix(".logs"), on_start,
                           cwd=REPO)
    outcome = _outcome(finished, ["python", *argv])
    if outcome["status"] != "done":
        return outcome
    lines = finished.stdout.strip().splitlines()
    figures = json.loads(lines[-1]) if lines else {"error": "printed nothing"}
    if row.kind == "raw":
        return {**outcome, "test_acc": figures["test/acc"], "train_time_s": round(figures["fit_s"], 2)}
    return {**outcome, **figures}


def run_tests(row: Row, target: Path, setting: Setting, on_start: Any) -> dict[str, Any]:
    """pytest on these tests, under the row's limit: the project's addopts left out (they need pytest-xdist), and
    ``row.other``'s workers where pytest-xdist is installed (a few tests run faster in one process)."""
    workers = list(row.other) if importlib.util.find_spec("xdist") is not None else []
    argv = ["-m", "pytest", "-o", "addopts=", "--import-mode=importlib", "-p", "no:cacheprovider", "-m", "not slow",
            "-q", "-rfs", *workers, *row.args]
    finished = run_command(_python(argv), setting.env, _limit(row, setting), target.with_suffix(".logs"), on_start,
                           cwd=REPO)
    outcome = _outcome(finished, ["python", *argv])
    lines = finished.stdout.strip().splitlines()
    summary = next((line.strip("= ") for line in reversed(lines) if re.search(r"\d+ (passed|failed|skipped)", line)),
                   "")
    counts = {kind: int(n) for n, kind in re.findall(r"(\d+) (passed|failed|skipped|errors?)", summary)}
    failures = [line for line in lines if line.startswith(("FAILED", "ERROR"))][:20]
    return {**outcome, "summary": summary, "counts": counts, "failures": failures,
            **({"error": "\n".join([*failures, finished.stdout.strip()[-1000:]])} if outcome["status"] != "done" else {})}


KINDS = {"train": run_train, "pair": run_pair, "resume": run_resume, "refusal": run_refusal, "sweep": run_sweep,
         "raw": run_script, "syncs": run_script, "tests": run_tests}


def ratios(results: Sequence[dict]) -> list[dict]:
    """Per recipe and precision: eager and captured train_time_s over the raw loop's fit time, same session."""
    out = []
    by = {(r.get("recipe"), r.get("precision"), r.get("side")): r for r in results if r.get("train_time_s")}
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
    runs = [r for r in results if r.get("group") == "speedrun" and r.get("test_acc") is not None]
    return {"seeds": len(runs), "reached_0.990": sum(r["test_acc"] >= 0.990 for r in runs),
            "train_time_s": sorted(r["train_time_s"] for r in runs), "test_acc": [r["test_acc"] for r in runs]}


def _device() -> str:
    import torch

    if not torch.cuda.is_available():
        return f"no CUDA device (torch {torch.__version__})"
    return f"{torch.cuda.get_device_name(0)}, torch {torch.__version__}, CUDA {torch.version.cuda}"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The gpu section's options (run.py adds them to its own)."""
    parser.add_argument("--gpu-rows", default=None, help="gpu: only these row groups, comma-separated (headline, "
                        "correctness, speedrun, compile, resume, tests, loop, clip, sgd, swa, ema, batch512, syncs, "
                        "main, ddp, sweep, tests_all)")
    parser.add_argument("--gpu-deadline-s", type=float, default=DEADLINE_S,
                        help=f"gpu: the whole section's deadline in seconds (default {DEADLINE_S:.0f}): rows that "
                             "cannot start before it are recorded as not run, and each row's limit is clipped to it")
    parser.add_argument("--pair-steps", type=int, default=PAIR_STEPS,
                        help=f"gpu: training steps of the correctness, clip, sgd and resume rows (default {PAIR_STEPS})")

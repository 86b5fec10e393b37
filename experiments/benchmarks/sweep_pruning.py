"""Benchmark: the same Optuna search with and without pruning: wall time, best val/acc, trials pruned.

Each side is one `train -m hparams_search=optuna` command on real MNIST (seeded TPE over lr, enc_sizes,
activation, dropout; short trials via trainer.limit_train_batches), run as a user runs it, from a temp dir,
into a sweep dir of its own. With --repeats N the sides alternate (A B A B) so that a drift in the
machine's speed hits both. Results: results/sweep_pruning_<trials>.json, and sweep_pruning.md (rebuilt from them)
beside this file.

    python experiments/benchmarks/sweep_pruning.py                      # 20 trials a side, median pruner
    python experiments/benchmarks/sweep_pruning.py --trials 12 --pruner hyperband --repeats 2
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(HERE))
from results_md import current_commit, machine  # noqa: E402  (a sibling file, not a package)


def command(args: argparse.Namespace, pruner: str, sweep_dir: Path) -> list[str]:
    return [sys.executable, "-m", "modelforge", "train", "-m", "hparams_search=optuna",
            f"hydra.sweeper.n_trials={args.trials}", f"hydra.sweeper.pruner={pruner}",
            f"trainer.max_epochs={args.epochs}", f"trainer.limit_train_batches={args.limit_train_batches}",
            f"hydra.sweep.dir={sweep_dir}"]


def run_side(args: argparse.Namespace, pruner: str, workdir: Path) -> dict:
    """One search: its wall time, and what its summary and study say."""
    import optuna

    sweep_dir = workdir / f"{pruner}_{time.time_ns()}"
    cmd = command(args, pruner, sweep_dir)
    # The checkout's modelforge and its sweeper plugin (hydra_plugins/), wherever the command runs from.
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (str(REPO), os.environ.get("PYTHONPATH")))),
           "MODELFORGE_DATA": args.data, "HYDRA_FULL_ERROR": "0"}
    start, cpu_before = time.perf_counter(), _children_cpu()
    result = subprocess.run(cmd, cwd=workdir, env=env, capture_output=True, text=True)
    seconds, cpu = time.perf_counter() - start, _children_cpu() - cpu_before
    if result.returncode != 0:
        raise SystemExit(f"the search failed ({result.returncode}): {' '.join(cmd)}\n{result.stderr[-3000:]}")
    rows = list(csv.DictReader((sweep_dir / "summary.csv").open()))
    study = optuna.load_study(study_name="modelforge", storage=f"sqlite:///{sweep_dir / 'optuna.db'}")
    best = study.best_trial
    best_row = next(r for r in rows if r["job"].split("_")[0] == str(best.number))
    return {"pruner": pruner, "seconds": round(seconds, 1), "cpu_seconds": round(cpu, 1), "trials": len(rows),
            "pruned": sum(r["status"] == "pruned" for r in rows), "failed": sum(r["status"] == "failed" for r in rows),
            "epochs_trained": sum(json.loads((Path(r["run_dir"]) / "metrics.json").read_text()).get("epochs", 0)
                                  for r in rows),
            "best_val_acc": best.value, "best_test_acc": float(best_row["test/acc"] or "nan"),
            "best_trial": best.number, "best_overrides": best_row["overrides"], "command": " ".join(cmd[1:])}


def _children_cpu() -> float:
    """CPU seconds (user + system) of this process's finished children: less moved by other work on a shared
    machine than wall time."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def section(report: dict) -> list[str]:
    """One run of this script as markdown: its conditions, a row per side, the commands."""
    sides = report["sides"]
    lines = [f"## {report['trials']} trials a side", "",
             f"{report['date']}, commit {report['commit']}: `trainer.max_epochs={report['epochs']} "
             f"trainer.limit_train_batches={report['limit_train_batches']}`, real MNIST, seeded TPE (seed 0); the "
             f"sides alternated, {report['repeats']} run(s) each, {report['seconds']} s in all. Conditions: "
             f"{report['note'] or 'not noted'}. `python experiments/benchmarks/sweep_pruning.py "
             f"--trials {report['trials']} --repeats {report['repeats']}`", "",
             "| pruner | wall time (median) | runs | CPU time (median) | trials pruned | epochs trained | best val/acc "
             "| its test/acc |", "|---|---|---|---|---|---|---|---|"]
    for pruner, runs in sides.items():
        median = statistics.median(r["seconds"] for r in runs)
        times = ", ".join(f"{r['seconds']:.0f} s" for r in runs)
        cpu = statistics.median(r.get("cpu_seconds", math.nan) for r in runs)
        pruned = "/".join(str(r["pruned"]) for r in runs)
        epochs = "/".join(str(r["epochs_trained"]) for r in runs)
        best_val = "/".join(f"{r['best_val_acc']:.4f}" for r in runs)
        best_test = "/".join(f"{r['best_test_acc']:.4f}" for r in runs)
        cpu_cell = "not measured" if math.isnan(cpu) else f"{cpu:.0f} s"  # before CPU times were recorded
        lines.append(f"| `{pruner}` | {median:.0f} s | {times} | {cpu_cell} | {pruned} of {report['trials']} | "
                     f"{epochs} of {report['trials'] * report['epochs']} | {best_val} | {best_test} |")
    base, pruned_side = (statistics.median(r["seconds"] for r in sides[p]) for p in sides)
    base_cpu, pruned_cpu = (statistics.median(r.get("cpu_seconds", math.nan) for r in sides[p]) for p in sides)
    commands = [re.sub(r"hydra\.sweep\.dir=\S+", "hydra.sweep.dir=DIR", runs[0]["command"]) for runs in sides.values()]
    fastest, fastest_pruned = (min(r["seconds"] for r in sides[p]) for p in sides)
    cpu_ratio = "" if math.isnan(base_cpu) else f" and {pruned_cpu / base_cpu:.2f}x the CPU time"
    return [*lines, "", f"With pruning: {pruned_side / base:.2f}x the wall time{cpu_ratio} of the search without it "
            f"(medians); the fastest run of each side: {fastest_pruned / fastest:.2f}x.", "",
            "```", *(f"python {c}" for c in commands), "```", ""]


def write_markdown(results_dir: Path, path: Path) -> None:
    """``sweep_pruning.md``, from every ``results/sweep_pruning_<trials>.json``."""
    reports = sorted((json.loads(p.read_text()) for p in results_dir.glob("sweep_pruning_*.json")),
                     key=lambda r: r["trials"])
    lines = ["# An Optuna search with and without pruning", "",
             "Written by `python experiments/benchmarks/sweep_pruning.py` (see its docstring). Each side is the whole "
             "`train -m` command, run from a temp dir with `MODELFORGE_DATA` set, into a sweep dir of its own; "
             "`none` is the search without a pruner.", "", *machine(), ""]
    for report in reports:
        lines += section(report)
    path.write_text("\n".join(lines))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--limit-train-batches", type=int, default=40)
    parser.add_argument("--pruner", default="median", help="median, successive_halving or hyperband")
    parser.add_argument("--repeats", type=int, default=1, help="runs of each side, alternated")
    parser.add_argument("--data", default=os.environ.get("MODELFORGE_DATA", str(REPO.parent / "shared/datasets/mnist")))
    parser.add_argument("--note", default="", help="the machine's conditions, for the record")
    args = parser.parse_args()
    sides: dict[str, list[dict]] = {"none": [], args.pruner: []}
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="mf_sweep_pruning_") as workdir:
        for repeat in range(args.repeats):
            for pruner in (list(sides) if repeat % 2 == 0 else list(sides)[::-1]):
                side = run_side(args, pruner, Path(workdir))
                sides[pruner].append(side)
                print(f"{pruner}: {side['seconds']:.0f} s, {side['pruned']} pruned, best val/acc "
                      f"{side['best_val_acc']:.4f}", flush=True)
    report = {"date": time.strftime("%Y-%m-%d"), "commit": current_commit(), "trials": args.trials,
              "epochs": args.epochs, "limit_train_batches": args.limit_train_batches, "repeats": args.repeats,
              "note": args.note, "seconds": round(time.perf_counter() - started), "sides": sides}
    (HERE / "results").mkdir(exist_ok=True)
    (HERE / "results" / f"sweep_pruning_{args.trials}.json").write_text(json.dumps(report, indent=2) + "\n")
    write_markdown(HERE / "results", HERE / "sweep_pruning.md")
    print("\n".join(section(report)))


if __name__ == "__main__":
    main()

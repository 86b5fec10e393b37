"""The same commands on two source trees, interleaved: this checkout against an earlier commit.

A refactoring may not cost speed. For each side (``PYTHONPATH`` pointing at its tree) this times
start-up (``summary``, ``train --help``, ``list models``) and the training epoch of
``train experiment=fast`` against the raw PyTorch loop (raw_loop.py) run between them, so each
side's epoch gets a ratio to a raw epoch measured moments apart. Runs alternate A B A B.
``--section loop`` instead runs the ``loop`` section's harness (bench_loop_overhead.py, this
checkout's copy for both trees) in a process per side and repeat: what modelforge's step adds over
the raw loop measured in the same process, on the one-layer model.

    python experiments/benchmarks/before_after.py --baseline d556246~1 --repeats 5
    python experiments/benchmarks/before_after.py --baseline 8a74f3a --repeats 5 --section loop
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
EPOCH_LINE = re.compile(r"epoch \d+(?:/\d+)? done in ([0-9.]+) s")
LIMITS = ("trainer.limit_train_batches=200", "trainer.limit_val_batches=20", "trainer.limit_test_batches=20")


def run(tree: Path, args: list[str], cwd: Path) -> tuple[float, str]:
    env = {**os.environ, "PYTHONPATH": str(tree), "HYDRA_FULL_ERROR": "0"}
    start = time.perf_counter()
    result = subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True)
    if result.returncode != 0:
        raise SystemExit(f"failed ({result.returncode}) in {tree}: {' '.join(args)}\n{result.stderr[-2000:]}")
    return time.perf_counter() - start, result.stdout


def side(tree: Path, work: Path, n: int) -> dict[str, float]:
    figures = {}
    for name, args in {"summary_s": ["-m", "modelforge", "summary", "model=cnn"],
                       "train_help_s": ["-m", "modelforge", "train", "--help"],
                       "list_s": ["-m", "modelforge", "list", "models"]}.items():
        figures[name] = run(tree, args, work)[0]
    run_dir = work / f"{tree.name}_{n}"
    run(tree, ["-m", "modelforge", "train", "experiment=fast", "trainer.accelerator=cpu", *LIMITS,
               f"hydra.run.dir={run_dir}"], work)
    figures["epoch_s"] = statistics.mean(float(s) for s in EPOCH_LINE.findall((run_dir / "train.log").read_text()))
    return figures


def raw_epoch(work: Path) -> float:
    _, out = run(REPO, [str(HERE / "raw_loop.py"), "--limit-train-batches=200", "--limit-val-batches=20",
                        "--limit-test-batches=20"], work)
    return statistics.mean(json.loads(out.strip().splitlines()[-1])["epoch_s"])


LOOP = ("import json, sys; sys.path.insert(0, {here!r}); from bench_loop_overhead import measure; "
        "v = measure({data!r}, {steps}, 1); print(json.dumps({{k: x[0] for k, x in v.items()}}))")


def loop_side(tree: Path, work: Path, data_dir: str, steps: int = 400) -> dict[str, float]:
    """The loop section's sides (ms per step) with ``tree``'s modelforge, and modelforge's step over the raw one."""
    _, out = run(tree, ["-c", LOOP.format(here=str(HERE), data=data_dir, steps=steps)], work)
    figures = {k: v * 1e3 for k, v in json.loads(out.strip().splitlines()[-1]).items()}
    figures["modelforge over raw"] = figures["modelforge train"] - figures["raw PyTorch loop"]
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", required=True, help="git revision of the 'before' tree")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--section", choices=("startup_epoch", "loop"), default="startup_epoch")
    parser.add_argument("--data-dir", default=os.environ.get("MODELFORGE_DATA", str(REPO.parent / "shared" / "datasets"
                                                                                       / "mnist")))
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="mf_before_after_"))
    before = work / "before"
    subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", str(before), args.baseline],
                   check=True, capture_output=True)
    trees = {"before": before, "after": REPO}
    values: dict[str, dict[str, list[float]]] = {k: {} for k in trees}
    try:
        for i in range(args.repeats):
            for name, tree in trees.items():
                if args.section == "loop":
                    figures = loop_side(tree, work, args.data_dir)
                else:
                    raw = raw_epoch(work)
                    figures = side(tree, work, i)
                    figures["epoch_ratio_to_raw"] = figures["epoch_s"] / raw
                for key, value in figures.items():
                    values[name].setdefault(key, []).append(value)
                print(f"[{i + 1}/{args.repeats}] {name}: " + ", ".join(f"{k} {v:.3f}" for k, v in figures.items()),
                      flush=True)
    finally:
        subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(before)], capture_output=True)
    # Medians, and minimums: on a shared machine other work only ever adds time, so the least is the steadiest.
    print(f"\nover {args.repeats} repeats (baseline {args.baseline}):")
    print(f"{'figure':<36} {'before':>9} {'after':>9} {'min before':>11} {'min after':>10}")
    for key in values["after"]:
        before, after = values["before"][key], values["after"][key]
        print(f"{key:<36} {statistics.median(before):>9.3f} {statistics.median(after):>9.3f} {min(before):>11.3f} "
              f"{min(after):>10.3f}")


if __name__ == "__main__":
    main()

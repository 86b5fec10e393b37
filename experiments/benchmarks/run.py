"""One benchmark command: modelforge against hand-written PyTorch, interleaved, medians and spread.

Sections (each writes ``results/<section>.json``; ``RESULTS.md`` is rebuilt from all of them):

- ``overhead``: ``python -m modelforge train experiment=fast`` vs ``raw_loop.py`` (same model, init,
  data tensors, batches, AdamW + OneCycle, label smoothing, validation): per-epoch time
  (training + validation) and whole-command time.
- ``loop``: what the training loop adds per step, on a one-layer model: a raw loop, a bare
  LightningModule on a bare Trainer (automatic and manual optimization), and ``modelforge train``
  (in one process, alternated).
- ``hooks``: a training step with no plugins, each plugin, all four, and the same network
  written by hand in plain ``torch.nn`` (no modelforge).
- ``hotpath``: per-step work modelforge removed from the training step, before vs after.
- ``dataread``: reading, checking and decoding MNIST's four files, with and without the md5 check.
- ``startup``: ``--help``, ``list``, ``summary``, and ``train`` to its first step, vs ``python -c "import torch"``
  and vs ``import torch, hydra.main, omegaconf`` (what any Hydra app on torch imports before it starts).
- ``build``: ``build_model`` and ``create_model`` vs torchvision's own constructor for resnet50, vit_b_16,
  convnext_tiny, mobilenet_v3_small, swin_t, maxvit_t (224x224 and 448x448) and a DenseNet-121 written in YAML, at
  224x224 and 512x512 (bench_build.py).
- ``segment``: one epoch of ``train task=segment model=unet`` vs the same U-Net, data and recipe in a hand-written
  torch loop (bench_segment.py), alternated in one process. Only with ``--only segment``.
- ``time_to_99``: the fast recipe on 5 seeds: test accuracy, training time, how many reach 99.0%.
  Long (about a minute per seed on 2 cores): only with ``--only time_to_99``.
- ``gpu``: the GPU path (precisions, channels_last, compile, a large-batch recipe, DDP over NCCL,
  a sweep), one run each, recording what ran and what broke (bench_gpu.py). Only with ``--only gpu``.

Runs alternate A B A B so a drift in machine speed hits both sides; each figure is the
median over repeats, and the spread is (max - min) / median.

    python experiments/benchmarks/run.py --quick          # < 5 min on 2 cores: small settings, in outputs/benchmarks/
    python experiments/benchmarks/run.py --smoke          # each section's code path, seconds
    python experiments/benchmarks/run.py                  # the full figures (about 15 min)
    python experiments/benchmarks/run.py --only time_to_99
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
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
RESULTS_DIR = HERE / "results"
sys.path.insert(0, str(HERE))
from bench_gpu import add_arguments as add_gpu_arguments  # noqa: E402
from results_md import current_commit, write_atomic, write_results  # noqa: E402  (a sibling file, not a package)

SECTIONS = ("overhead", "loop", "hooks", "hotpath", "dataread", "startup", "build", "segment", "time_to_99",
            "gpu")
ON_REQUEST = ("segment", "time_to_99", "gpu")  # long, or needing a GPU: only with --only
NEEDS_MNIST = ("overhead", "loop", "dataread", "startup", "segment", "time_to_99", "gpu")  # not build, hooks, hotpath
EPOCH_LINE = re.compile(r"epoch \d+(?:/\d+)? done in ([0-9.]+) s")


def _env() -> dict[str, str]:
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": path, "HYDRA_FULL_ERROR": "0"}


def timed(cmd: list[str], cwd: Path = REPO) -> tuple[float, subprocess.CompletedProcess]:
    """Wall seconds of the whole command, and its result (which must succeed)."""
    start = time.perf_counter()
    result = subprocess.run(cmd, cwd=cwd, env=_env(), capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if result.returncode != 0:
        raise SystemExit(f"benchmark command failed ({result.returncode}): {' '.join(cmd)}\n"
                         f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    return seconds, result


def summary(values: list[float]) -> dict[str, float]:
    median = statistics.median(values)
    return {"median": median, "spread": (max(values) - min(values)) / median if median else 0.0,
            "min": min(values), "max": max(values), "n": len(values)}


def interleaved(runs: dict[str, Callable[[], dict[str, float]]], repeats: int) -> dict[str, dict[str, list[float]]]:
    """Each repeat runs every side once, in turn (A B A B); per side and figure, the values."""
    values: dict[str, dict[str, list[float]]] = {name: {} for name in runs}
    for i in range(repeats):
        for name, run in runs.items():
            for figure, value in run().items():
                values[name].setdefault(figure, []).append(value)
            print(f"  [{i + 1}/{repeats}] {name}: " + ", ".join(f"{k} {v[-1]:.2f}" for k, v in values[name].items()),
                  flush=True)
    return values


# ---------------------------------------------------------------- overhead
def overhead(args: argparse.Namespace) -> dict:
    limits = ({"train": 2, "val": 1, "test": 1} if args.smoke else
              {"train": args.train_batches or 200, "val": 20, "test": 20} if args.quick else {})
    if args.train_batches and not args.quick:
        limits = {"train": args.train_batches}
    work = Path(tempfile.mkdtemp(prefix="mf_bench_"))
    mf_cmd = [sys.executable, "-m", "modelforge", "train", "experiment=fast", f"seed={args.seed}",
              "trainer.accelerator=cpu", *([f"data.data_dir={args.data_dir}"] if args.data_dir else []),
              *[f"trainer.limit_{k}_batches={v}" for k, v in limits.items()]]
    raw_cmd = [sys.executable, str(HERE / "raw_loop.py"), f"--seed={args.seed}",
               *([f"--data-dir={args.data_dir}"] if args.data_dir else []),
               *[f"--limit-{k}-batches={v}" for k, v in limits.items()]]
    count = iter(range(1_000_000))

    def modelforge_run() -> dict[str, float]:
        run_dir = work / f"run{next(count)}"
        seconds, _ = timed([*mf_cmd, f"hydra.run.dir={run_dir}"])
        metrics = json.loads((run_dir / "metrics.json").read_text())
        epochs = [float(s) for s in EPOCH_LINE.findall((run_dir / "train.log").read_text())]
        return {"epoch_s": statistics.mean(epochs), "fit_s": metrics["train_time_s"], "command_s": seconds,
                "test_acc": metrics["test/acc"]}

    def raw_run() -> dict[str, float]:
        seconds, result = timed(raw_cmd)
        out = json.loads(result.stdout.strip().splitlines()[-1])
        return {"epoch_s": statistics.mean(out["epoch_s"]), "fit_s": out["fit_s"], "command_s": seconds,
                "test_acc": out["test/acc"]}

    check_same_model(args.seed)
    timed([*raw_cmd, "--limit-train-batches=2", "--limit-val-batches=1", "--limit-test-batches=1"])  # warm caches
    values = interleaved({"raw PyTorch loop": raw_run, "modelforge train": modelforge_run}, args.repeats)
    # Each pair ran back to back: its ratio holds even when the machine's speed drifts between pairs.
    raw, ours = values["raw PyTorch loop"], values["modelforge train"]
    pairs = {key: [m / r for m, r in zip(ours[key], raw[key])] for key in ("epoch_s", "fit_s", "command_s")}
    return {"commands": {"modelforge train": " ".join(mf_cmd[1:]), "raw PyTorch loop": " ".join(raw_cmd[1:])},
            "limits": limits, "repeats": args.repeats, "pair_ratios": {k: summary(v) for k, v in pairs.items()},
            "figures": {side: {k: summary(v) for k, v in figs.items()} for side, figs in values.items()}}


def check_same_model(seed: int) -> None:
    """The raw loop's model has the same architecture and initial weights as ``train experiment=fast``."""
    import torch
    from hydra import compose, initialize_config_dir
    from raw_loop import fast_recipe

    from modelforge.build import build_model, model_config_from_run
    from modelforge.config import conf_dir, load_config

    with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
        plain = load_config(compose("train", overrides=["experiment=fast", f"seed={seed}"]))
    ours = build_model(model_config_from_run(plain), seed=seed).state_dict()
    raw = build_model(fast_recipe()["model"], seed=seed).state_dict()
    assert ours.keys() == raw.keys() and all(torch.equal(ours[k], raw[k]) for k in ours), \
        "raw_loop.py builds another model than `train experiment=fast`: fix fast_recipe()"


# ---------------------------------------------------------------- loop
def loop(args: argparse.Namespace) -> dict:
    from bench_loop_overhead import measure

    from modelforge.data import resolve_data_dir

    steps, rounds = (10, 1) if args.smoke else (200, 3) if args.quick else (400, 7)
    values = measure(str(resolve_data_dir(args.data_dir)), steps, rounds)
    return {"steps": steps, "rounds": rounds, "figures": {name: summary(v) for name, v in values.items()}}


# ---------------------------------------------------------------- hooks
def hooks(args: argparse.Namespace) -> dict:
    import logging

    import torch
    from bench_hook_overhead import measure_once, step_time
    from hand_written_cnn import hand_written_cnn

    from modelforge import build_model

    logging.disable(logging.INFO)  # verbose's one report would flood the output
    batch, repeats, rounds = (16, 1, 1) if args.smoke else (128, 4, 3) if args.quick else (128, 30, 5)
    model = build_model({"name": "cnn"}, seed=0)
    plain = hand_written_cnn(model)
    x, y = torch.randn(batch, 1, 28, 28), torch.randint(0, 10, (batch,))

    results: list[dict[str, float]] = []
    with tempfile.TemporaryDirectory() as run_dir:
        step_time(model, x, y, repeats)
        for i in range(rounds):  # every configuration once per round: interleaved
            # The hand-written model goes first in even rounds and last in odd ones: no position bias.
            times = {"hand-written torch.nn (no modelforge)": step_time(plain, x, y, repeats)} if i % 2 == 0 else {}
            times.update(measure_once(model, x, y, repeats, Path(run_dir)))
            if i % 2:
                times["hand-written torch.nn (no modelforge)"] = step_time(plain, x, y, repeats)
            results.append(times)
            print(f"  [{i + 1}/{rounds}] " + ", ".join(f"{k} {v * 1e3:.1f} ms" for k, v in times.items()), flush=True)
    return {"batch": batch, "rounds": rounds, "threads": torch.get_num_threads(),
            "figures": {name: summary([r[name] for r in results]) for name in results[0]}}


# ---------------------------------------------------------------- hot path
def hotpath(args: argparse.Namespace) -> dict:
    """Per-step costs that modelforge removed, before vs after, in this process (interleaved)."""
    import torch
    from torch.utils import benchmark
    from torchmetrics.classification import MulticlassAccuracy

    logits, y = torch.randn(32, 10), torch.randint(0, 10, (32,))
    before = MulticlassAccuracy(10, average="micro")  # accuracy(logits, y): validates, and computes a batch value
    after = MulticlassAccuracy(10, average="micro", validate_args=False)  # accuracy.update(logits, y)
    gathered = MulticlassAccuracy(10, average="micro", validate_args=False)
    # Since session 12 a step keeps its argmax, and every 32 steps one update takes them all.
    every_32 = "m.update(torch.cat([l.argmax(1) for _ in range(32)]), torch.cat([y] * 32))"
    cases = {"train accuracy per step: before (forward, validate_args)": ("m(l, y)", before, 1),
             "train accuracy per step: after (update, no validation)": ("m.update(l, y)", after, 1),
             "train accuracy per step: now (argmax per step, one update per 32 steps)": (every_32, gathered, 32)}
    values: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(1 if args.smoke else 3 if args.quick else 7):
        for name, (stmt, metric, steps) in cases.items():
            timer = benchmark.Timer(stmt, globals={"m": metric, "l": logits, "y": y, "torch": torch})
            values[name].append(timer.blocked_autorange(min_run_time=0.2).median / steps)
    return {"batch": 32, "figures": {name: summary(v) for name, v in values.items()}}


# ---------------------------------------------------------------- data read
def dataread(args: argparse.Namespace) -> dict:
    """MNIST's four files found, read, checked (md5) and decoded, as each run does once: with and
    without the md5 check (data.verify), interleaved."""
    from modelforge.data import MNIST, ensure_files, load_idx_set, resolve_data_dir

    data_dir = resolve_data_dir(args.data_dir)
    paths = ensure_files(data_dir, MNIST)  # downloads if need be

    def read(verify: bool) -> Callable[[], dict]:
        def run() -> dict:
            start = time.perf_counter()
            load_idx_set(paths, MNIST, verify=verify)
            return {"s": time.perf_counter() - start}
        return run

    values = interleaved({"read + md5 (data.verify=true, the default)": read(True),
                          "read only (data.verify=false)": read(False)}, 1 if args.smoke else 3 if args.quick else 7)
    return {"data_dir": str(data_dir), "figures": {name: summary(v["s"]) for name, v in values.items()}}


# ---------------------------------------------------------------- startup
def startup(args: argparse.Namespace) -> dict:
    """Each command's whole process, wall and CPU seconds (user + system: less swayed by other processes on a busy
    machine), interleaved after one round not counted. The children write and read their bytecode as a user's
    Python does (PYTHONDONTWRITEBYTECODE dropped): else modelforge's modules, not torch's, are compiled on every
    start, and start-up would measure the compiler."""
    import resource

    data = [f"data.data_dir={args.data_dir}"] if args.data_dir else []
    work = Path(tempfile.mkdtemp(prefix="mf_bench_startup_"))
    count = iter(range(1_000_000))
    py = sys.executable
    env = {k: v for k, v in _env().items() if k != "PYTHONDONTWRITEBYTECODE"}
    commands = {
        'python -c "import torch"': lambda: [py, "-c", "import torch"],
        'python -c "import torch, hydra.main, omegaconf"': lambda: [py, "-c", "import torch, hydra.main, omegaconf"],
        "modelforge --help": lambda: [py, "-m", "modelforge", "--help"],
        "modelforge list": lambda: [py, "-m", "modelforge", "list"],
        "modelforge summary": lambda: [py, "-m", "modelforge", "summary"],
        # Start-up, data checks, one training step, one validation and one test batch.
        "modelforge train (to its first step)": lambda: [
            py, "-m", "modelforge", "train", *data, "trainer.max_epochs=1", "trainer.limit_train_batches=1", "trainer.limit_val_batches=1",
            "trainer.limit_test_batches=1", "trainer.accelerator=cpu", f"hydra.run.dir={work / str(next(count))}"],
    }

    def timed_cpu(cmd: list[str]) -> dict[str, float]:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        result = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
        wall = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if result.returncode != 0:
            raise SystemExit(f"benchmark command failed ({result.returncode}): {' '.join(cmd)}\n{result.stderr[-3000:]}")
        return {"s": wall, "cpu_s": after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime}

    for make in commands.values():  # not counted: compiles modelforge's bytecode, warms the file cache
        timed_cpu(make())
    runs = {name: (lambda make=make: timed_cpu(make())) for name, make in commands.items()}
    values = interleaved(runs, args.repeats + 1)
    return {"commands": {name: " ".join(make()[1:]) for name, make in commands.items()}, "repeats": args.repeats + 1,
            "figures": {name: summary(v["s"]) for name, v in values.items()},
            "cpu": {name: summary(v["cpu_s"]) for name, v in values.items()}}


# ---------------------------------------------------------------- build
def build(args: argparse.Namespace) -> dict:
    """build_model and create_model vs torchvision's constructor, seven models at 224 and 512 (interleaved)."""
    import torch
    from bench_build import BUILD, CREATE, MODELS, TORCHVISION, calls_for, check, compose, model_sides, overrides, sides

    rounds = 1 if args.smoke else 3 if args.quick else 7
    chosen = MODELS[-1:] if args.smoke else MODELS  # smoke: the densenet graph alone, its code path
    models = {}
    for name in chosen:
        for side in model_sides(name):
            cfg = compose(name, side)
            shape = check(name, side, cfg, outputs=not args.smoke)  # same parameters (and outputs) before timing
            warm = {s: run() for s, run in sides(name, side, cfg).items()} if not args.smoke else {}
            # warm: Hydra's first compose, torch's first kernels; then as many calls a round as fit in ~0.4 s
            calls = (calls_for(warm[TORCHVISION]["s"], *((0.1, 3) if args.quick else ())) if warm else 1)
            values = interleaved(sides(name, side, cfg, calls), rounds)
            models[f"{name} {side}"] = {
                "name": name, "side": side, "overrides": overrides(side), **shape, "calls_per_round": calls,
                "figures": {s: summary(v["s"]) for s, v in values.items()},
                "ratios": {s: summary([a / b for a, b in zip(v["s"], values[TORCHVISION]["s"])])
                           for s, v in values.items() if s != TORCHVISION}}
    for name in chosen:  # build time at 512 over build time at 224 (medians): the same when shapes cost nothing
        small, large = (models[f"{name} {side}"] for side in model_sides(name))
        large["vs_224"] = large["figures"][BUILD]["median"] / small["figures"][BUILD]["median"]
    return {"threads": torch.get_num_threads(), "rounds": rounds, "sides": [TORCHVISION, BUILD, CREATE],
            "models": models}


# ---------------------------------------------------------------- segment
def segment(args: argparse.Namespace) -> dict:
    from bench_segment import measure, pair_ratios

    from modelforge.data import resolve_data_dir

    train_batches, val_batches = (2, 1) if args.smoke else (10, 2) if args.quick else (20, 4)
    rounds = args.repeats
    if args.train_batches:
        train_batches = args.train_batches
    values = measure(str(resolve_data_dir(args.data_dir)), train_batches, val_batches, rounds)
    return {"train_batches": train_batches, "val_batches": val_batches, "rounds": rounds,
            "pair_ratios": summary(pair_ratios(values)), "figures": {name: summary(v) for name, v in values.items()}}


# ---------------------------------------------------------------- time to 99%
def time_to_99(args: argparse.Namespace) -> dict:
    work = Path(tempfile.mkdtemp(prefix="mf_bench_t99_"))
    seeds = list(range(args.seeds))
    rows = []
    for seed in seeds:
        run_dir = work / f"seed{seed}"
        cmd = [sys.executable, "-m", "modelforge", "train", "experiment=fast", f"seed={seed}",
               *([f"data.data_dir={args.data_dir}"] if args.data_dir else []), f"hydra.run.dir={run_dir}"]
        seconds, _ = timed(cmd)
        metrics = json.loads((run_dir / "metrics.json").read_text())
        rows.append({"seed": seed, "test_acc": metrics["test/acc"], "train_time_s": metrics["train_time_s"],
                     "command_s": seconds})
        print(f"  seed {seed}: test/acc {metrics['test/acc']:.4f}, train {metrics['train_time_s']:.1f} s", flush=True)
    return {"command": "python -m modelforge train experiment=fast seed=S", "rows": rows,
            "reached": sum(r["test_acc"] >= 0.99 for r in rows),
            "test_acc": summary([r["test_acc"] for r in rows]),
            "train_time_s": summary([r["train_time_s"] for r in rows])}


# ---------------------------------------------------------------- GPU
def gpu(args: argparse.Namespace) -> dict:
    from bench_gpu import measure

    groups = args.gpu_rows.split(",") if args.gpu_rows else None
    header = {"mode": "quick" if args.quick else "full", "note": args.note, "commit": current_commit()}
    return measure(args.results_dir, _env(), accelerator=args.accelerator, data_dir=args.data_dir,
                   train_batches=args.train_batches, groups=groups, deadline_s=args.gpu_deadline_s,
                   pair_steps=args.pair_steps, header=header, markdown=_markdown(args.results_dir))


def default_results_dir(smoke: bool, quick: bool, accelerator: str, sections: list[str]) -> Path:
    """The recorded figures (``results/``) are of full settings on the device they name: a check at small
    settings, or of the GPU section's plumbing on a CPU, writes under outputs/ (ignored by git), never over them."""
    mode = "smoke" if smoke else "quick" if quick else "gpu-on-cpu" if accelerator == "cpu" and "gpu" in sections \
        else None
    return RESULTS_DIR if mode is None else REPO / "outputs" / "benchmarks" / mode


def _markdown(results_dir: Path) -> Path:
    """RESULTS.md beside the benchmarks for their results folder; for another folder (a test's), in it."""
    return HERE / "RESULTS.md" if results_dir.resolve() == RESULTS_DIR.resolve() else results_dir / "RESULTS.md"


def check_data(data_dir: str | None, chosen: list[str]) -> None:
    """MNIST found (or fetched, as train does) before any section starts; else one message and exit 2."""
    needing = [name for name in chosen if name in NEEDS_MNIST]
    if not needing:
        return
    from modelforge.data import MNIST, ensure_files, resolve_data_dir
    from modelforge.errors import DataError

    try:
        ensure_files(resolve_data_dir(data_dir), MNIST)
    except DataError as exc:
        others = [name for name in SECTIONS if name not in NEEDS_MNIST]
        print(f"error: {exc}\n  the sections {', '.join(needing)} read MNIST; these do not: "
              + " ".join(f"--only {name}" for name in others), file=sys.stderr)
        raise SystemExit(2) from None


def torchvision_found() -> bool:
    """Whether the build section finds torchvision: in the environment, or beside it where bench_build.py looks
    (``TORCHVISION_BESIDE``: read here without importing bench_build, which imports torch)."""
    import importlib.util

    return importlib.util.find_spec("torchvision") is not None or (Path(sys.prefix) / "torchvision-tests" /
                                                                   "torchvision").is_dir()


def sections_to_run(only: list[str] | None, has_torchvision: bool) -> list[str]:
    """The sections asked for: ``--only``'s, else every one not run on request alone. A run of them all leaves out
    ``build`` without torchvision (an optional test dependency), saying how to add it; ``--only build`` runs it and
    stops with that line."""
    if only:
        return only
    chosen = [s for s in SECTIONS if s not in ON_REQUEST]
    if not has_torchvision:
        print("== build left out: it compares with torchvision 0.28, not installed here: pip install --no-deps "
              f"--target {Path(sys.prefix) / 'torchvision-tests'} torchvision==0.28.0, then --only build", flush=True)
        chosen.remove("build")
    return chosen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small settings: under 5 minutes on 2 cores")
    parser.add_argument("--smoke", action="store_true", help="the smallest settings, one round each: checks that each "
                        "section runs (tests/test_benchmarks_run.py), its figures mean nothing")
    parser.add_argument("--results-dir", type=Path, default=None, help="where results/*.json and RESULTS.md are "
                        "written (default: the recorded ones, experiments/benchmarks/results, for full settings; "
                        "outputs/benchmarks/MODE for --quick, --smoke and the gpu section's --accelerator cpu)")
    parser.add_argument("--only", choices=SECTIONS, action="append", help="run only this section (repeatable)")
    parser.add_argument("--repeats", type=int, default=None, help="pairs per comparison (default 2 quick, 3 full)")
    parser.add_argument("--train-batches", type=int, default=None, help="overhead: training batches per epoch "
                        "(default: 200 with --quick, else the whole epoch)")
    parser.add_argument("--seeds", type=int, default=5, help="time_to_99: seeds 0..N-1")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--accelerator", default="gpu", help="gpu: the accelerator of the gpu section "
                        "(cpu: a quick check of the section's plumbing, 2 batches per stage)")
    add_gpu_arguments(parser)
    parser.add_argument("--note", default="", help="conditions to record with the figures (e.g. 'idle machine')")
    parser.add_argument("--data-dir", default=os.environ.get("MODELFORGE_DATA"),
                        help="MNIST folder (default: $MODELFORGE_DATA, else modelforge's default)")
    args = parser.parse_args()
    args.quick = args.quick or args.smoke
    args.repeats = args.repeats or (1 if args.smoke else 2 if args.quick else 3)
    chosen = sections_to_run(args.only, torchvision_found())
    check_data(args.data_dir, chosen)
    if args.results_dir is None:
        args.results_dir = default_results_dir(args.smoke, args.quick, args.accelerator, chosen)
    args.results_dir.mkdir(parents=True, exist_ok=True)
    sections = {"overhead": overhead, "loop": loop, "hooks": hooks, "hotpath": hotpath, "dataread": dataread,
                "startup": startup, "build": build, "segment": segment,
                "time_to_99": time_to_99, "gpu": gpu}
    for name in chosen:
        print(f"== {name}", flush=True)
        started = time.perf_counter()
        result = sections[name](args)
        result.update(mode="smoke" if args.smoke else "quick" if args.quick else "full", note=args.note,
                      commit=current_commit(),
                      seconds=round(time.perf_counter() - started, 1), date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()))
        write_atomic(args.results_dir / f"{name}.json", json.dumps(result, indent=2) + "\n")  # never half a file
    print(write_results(args.results_dir, _markdown(args.results_dir)))


if __name__ == "__main__":
    main()

"""Benchmark: cost of hook plugins on a training step, against the same model with no plugins.

Measures forward + backward of the default `cnn` on a batch of 128 (CPU, float32) with:
no plugins (the baseline), each plugin attached, and all plugins attached then removed
(must be back at the baseline: removal leaves no hook behind).

    python experiments/benchmarks/bench_hook_overhead.py [--batch-size 128] [--repeats 30] [--rounds 5]
"""

from __future__ import annotations

import argparse
import logging
import statistics
import tempfile
from pathlib import Path

import torch
from torch.utils import benchmark

from modelforge import build_hook_plugins, build_model

PLUGINS = {
    "verbose (after its first call)": {"verbose": {}},
    "grad_clip": {"grad_clip": {"value": 1.0}},
    "grad_monitor": {"grad_monitor": {}},
    "feature_capture (encoder.*)": {"feature_capture": {"layers": ["encoder.*"]}},
}


def step_time(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, repeats: int) -> float:
    """Median seconds of one forward + backward."""
    def step() -> None:
        model.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(model(x), y).backward()

    step()  # warm-up, and lets `verbose` spend its first call
    return benchmark.Timer(stmt="step()", globals={"step": step}).blocked_autorange(min_run_time=repeats * 0.05).median


def measure_once(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, repeats: int,
                 run_dir: Path) -> dict[str, float]:
    """One round: every configuration once, in a fixed order."""
    times = {"no plugins (baseline)": step_time(model, x, y, repeats)}
    for name, cfg in PLUGINS.items():
        plugin = build_hook_plugins(cfg)[0]
        with plugin.attach(model, run_dir=run_dir):
            times[name] = step_time(model, x, y, repeats)
    all_plugins = build_hook_plugins({k: v for cfg in PLUGINS.values() for k, v in cfg.items()})
    handles = [p.attach(model, run_dir=run_dir) for p in all_plugins]
    times["all four attached"] = step_time(model, x, y, repeats)
    for handle in handles:
        handle.remove()
    times["all attached, then removed"] = step_time(model, x, y, repeats)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    logging.disable(logging.INFO)  # verbose's one report would flood the table
    torch.manual_seed(0)
    model = build_model({"name": "cnn"}, seed=0)
    x, y = torch.randn(args.batch_size, 1, 28, 28), torch.randint(0, 10, (args.batch_size,))

    # Rounds interleave the configurations, so a drift in CPU speed (frequency, other
    # processes) hits all of them alike; each figure is the median over rounds.
    rounds: list[dict[str, float]] = []
    with tempfile.TemporaryDirectory() as run_dir:
        step_time(model, x, y, args.repeats)  # warm-up of allocator and kernels
        for _ in range(args.rounds):
            rounds.append(measure_once(model, x, y, args.repeats, Path(run_dir)))
    medians = {name: statistics.median(r[name] for r in rounds) for name in rounds[0]}
    spread = {name: (max(r[name] for r in rounds) - min(r[name] for r in rounds)) / medians[name]
              for name in rounds[0]}
    base = medians["no plugins (baseline)"]

    print(f"| configuration | ms / step (batch {args.batch_size}) | vs baseline | spread over rounds |")
    print("|---|---:|---:|---:|")
    for name, seconds in medians.items():
        print(f"| {name} | {seconds * 1e3:.2f} | {seconds / base:.2f}x | {spread[name]:.0%} |")
    print(f"\nmedian of {args.rounds} rounds; torch {torch.__version__}, {torch.get_num_threads()} threads, CPU float32")


if __name__ == "__main__":
    main()

"""Fine-tuning an MNIST cnn on Fashion-MNIST, against training from scratch for the same number of steps.

    MODELFORGE_DATA=/path/to/mnist python experiments/finetune_fashion/run.py [--out DIR] [--fashion-dir DIR]

1. trains the default cnn on MNIST (``experiment=fast``, 300 steps: 98.3% test accuracy);
2. on Fashion-MNIST, for each budget of steps (``--steps``, default 50 and one whole epoch of 430 at batch 128),
   with the same recipe (the default: Adam, one-cycle over the run, batch 128, seed 0), trains three ways:
   from scratch; from the MNIST run with the encoder frozen (``init.from=RUN freeze=[encoder.*]``);
   from the MNIST run, everything trained (``init.from=RUN``).

Prints a Markdown table (test/acc, ``train_time_s`` from metrics.json, and the whole command's wall time)
and writes it, with every run's metrics.json, to OUT/results.json. Every run is a plain CLI command, printed
before it starts. Results: RESULTS.md beside this file.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

PRETRAIN = ["experiment=fast", "trainer.limit_train_batches=300"]
WAYS = {  # name: the overrides that make it
    "from scratch": [],
    "fine-tuned, encoder frozen": ["init.from={pretrained}", "freeze=[encoder.*]"],
    "fine-tuned, all layers": ["init.from={pretrained}"],
}
DEFAULT_FASHION = Path("/usr/share/datasets/fashion-mnist")  # Debian's dataset-fashion-mnist package


def train(run_dir: Path, overrides: list[str]) -> dict:
    """``python -m modelforge train OVERRIDES hydra.run.dir=RUN_DIR``; its metrics.json, with the wall time."""
    command = [sys.executable, "-m", "modelforge", "train", *overrides, f"hydra.run.dir={run_dir}"]
    print("$", shlex.join(["python", *command[1:]]), flush=True)
    started = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    metrics = json.loads((run_dir / "metrics.json").read_text())
    return {**metrics, "wall_s": round(time.perf_counter() - started, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("outputs/finetune_fashion") / time.strftime("%Y-%m-%d_%H-%M-%S"))
    parser.add_argument("--fashion-dir", type=Path, default=DEFAULT_FASHION if DEFAULT_FASHION.is_dir() else None,
                        help="the four Fashion-MNIST files (default: Debian's package, else modelforge's cache)")
    parser.add_argument("--steps", type=int, nargs="+", default=[50, 430],
                        help="training steps per budget (430: one epoch at batch 128)")
    args = parser.parse_args()
    if not os.environ.get("MODELFORGE_DATA"):
        print("note: MODELFORGE_DATA is unset: MNIST comes from ~/.cache/modelforge/mnist", file=sys.stderr)
    out = args.out.absolute()
    pretrained = out / "mnist"
    runs = {"pretrain on MNIST": train(pretrained, PRETRAIN)}
    fashion = ["data=fashion_mnist", *([f"data.data_dir={args.fashion_dir}"] if args.fashion_dir else [])]
    rows = []
    for steps in args.steps:
        for way, extra in WAYS.items():
            name = f"{way}, {steps} steps"
            overrides = [*fashion, "trainer.max_epochs=1", f"trainer.limit_train_batches={steps}",
                         *(o.format(pretrained=pretrained) for o in extra)]
            runs[name] = metrics = train(out / name.replace(", ", "_").replace(" ", "_"), overrides)
            rows.append(f"| {steps} | {way} | {metrics['test/acc']:.4f} | {metrics['train_time_s']:.1f} "
                        f"| {metrics['wall_s']:.1f} |")
    table = "\n".join(["| steps | Fashion-MNIST run | test/acc | train_time_s | wall_s |",
                       "| ---: | --- | ---: | ---: | ---: |", *rows])
    (out / "results.json").write_text(json.dumps({"table": table, "runs": runs}, indent=2))
    mnist = runs["pretrain on MNIST"]
    print(f"\nMNIST run: test/acc {mnist['test/acc']:.4f}, train_time_s {mnist['train_time_s']:.1f}, "
          f"wall_s {mnist['wall_s']:.1f}\n\n{table}\n\nresults: {out / 'results.json'}")


if __name__ == "__main__":
    main()

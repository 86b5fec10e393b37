"""CPU inference of one model four ways, side by side in one process: eager, ``torch.compile``, the
``.pt2`` program that ``export format=pt2`` writes, and onnxruntime on the ``.onnx`` that
``export format=onnx`` writes.

    python experiments/benchmarks/bench_inference.py            # cnn and resnet18, batch 1 and 256
    python experiments/benchmarks/bench_inference.py --quick    # fewer repeats

For each model and batch size the four sides alternate in blocks (A B C D, repeated): each block makes WARM
untimed calls, then BLOCK calls timed one by one. Not call by call: onnxruntime's worker threads spin for a
while after each run (its default), and a torch call right after one ran 10x slower (7 ms -> 95 ms for the
cnn at batch 1) than in a block of its own; the table gives the median per-image latency at batch 1 and images per second at batch 256, with the
spread (interquartile range). Weights are the builder's own init (timing does not depend on them).
``export``'s own check needs a run's test images, so it is off here; instead every side's output on the
timed batch is compared with eager's (atol 1e-4) before timing.
Results: ``results/inference.json`` and ``results/inference.md``.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch

import modelforge
from modelforge.deploy.export import export
from modelforge.deploy.runtime import open_model

HERE = Path(__file__).resolve().parent
WARM, BLOCK = 3, 10
MODELS = {  # the default cnn and the zoo's resnet18, both for MNIST's 1x28x28 and 10 classes
    "cnn": lambda: modelforge.create_model("cnn", ["in_channels=1", "input_size=[28,28]", "n_classes=10"]),
    "resnet18": lambda: modelforge.create_model("resnet18", ["in_channels=1", "input_size=[28,28]", "n_classes=10"]),
}


def sides(model: torch.nn.Module, folder: Path) -> dict[str, Callable[[torch.Tensor], torch.Tensor]]:
    """The four ways to run ``model``, each a function of a float batch."""
    compiled = torch.compile(model)
    pt2 = export(model, "pt2", folder / "model.pt2", check=False)
    onnx = export(model, "onnx", folder / "model.onnx", check=False)
    return {"eager": model, "torch.compile": compiled, ".pt2 program": open_model(pt2).forward,
            "onnxruntime": open_model(onnx).forward}


def time_sides(runs: dict[str, Callable], batch: torch.Tensor, repeats: int) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {name: [] for name in runs}
    with torch.inference_mode():
        reference = runs["eager"](batch)
        for name, run in runs.items():  # warm-up (compile happens here), and the outputs agree
            for _ in range(3):
                out = run(batch)
            assert torch.allclose(out, reference, atol=1e-4), f"{name} differs from eager"
        for _ in range(max(repeats // BLOCK, 1)):  # sides alternate by blocks: see the module docstring
            for name, run in runs.items():
                for _ in range(WARM):
                    run(batch)
                for _ in range(BLOCK):
                    start = time.perf_counter()
                    run(batch)
                    times[name].append(time.perf_counter() - start)
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    results = []
    for model_name, make in MODELS.items():
        model = make().eval()
        model.model_config = {"name": model_name}  # what export's metadata records
        with tempfile.TemporaryDirectory() as folder:
            runs = sides(model, Path(folder))
            for batch_size, repeats in ((1, 50 if args.quick else 300), (256, 5 if args.quick else 30)):
                batch = torch.randn(batch_size, *model.input_shape)
                for side, times in time_sides(runs, batch, repeats).items():
                    q1, median, q3 = statistics.quantiles(times, n=4)
                    results.append({"model": model_name, "side": side, "batch": batch_size, "repeats": repeats,
                                    "median_s": median, "iqr_s": q3 - q1,
                                    "per_image_ms": 1e3 * median / batch_size, "images_per_s": batch_size / median})
                    print(f"{model_name:9} batch {batch_size:3}  {side:14} {1e3 * median / batch_size:8.3f} ms/image"
                          f"  {batch_size / median:9.0f} images/s", flush=True)
    machine = {"python": platform.python_version(), "torch": torch.__version__, "threads": torch.get_num_threads(),
               "cpu": platform.processor() or platform.machine(), "command": " ".join(["python", *sys.argv])}
    (HERE / "results").mkdir(exist_ok=True)
    (HERE / "results" / "inference.json").write_text(json.dumps({"machine": machine, "results": results}, indent=1))
    lines = ["# CPU inference: eager, torch.compile, .pt2, onnxruntime\n", f"`{machine['command']}`; torch "
             f"{machine['torch']}, {machine['threads']} threads, {machine['cpu']}\n",
             "| model | side | batch 1: ms/image (IQR) | batch 256: images/s | vs eager (batch 1, batch 256) |",
             "|---|---|---|---|---|"]
    by = {(r["model"], r["side"], r["batch"]): r for r in results}
    for model_name in MODELS:
        for side in ("eager", "torch.compile", ".pt2 program", "onnxruntime"):
            one, many = by[model_name, side, 1], by[model_name, side, 256]
            eager1, eager256 = by[model_name, "eager", 1], by[model_name, "eager", 256]
            lines.append(f"| {model_name} | {side} | {one['per_image_ms']:.3f} ({1e3 * one['iqr_s']:.3f}) | "
                         f"{many['images_per_s']:.0f} | {eager1['median_s'] / one['median_s']:.2f}x, "
                         f"{many['images_per_s'] / eager256['images_per_s']:.2f}x |")
    (HERE / "results" / "inference.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Benchmark: does data=image_folder's loader keep up with training? Images/s of the loader alone vs a training step.

Three figures, in one process, on one folder of images:

- **loader alone**, for each ``--workers`` count: the training DataLoader of ``data=image_folder`` (decode, random
  resized crop, flip, normalize, collate) iterated without a model, after its first batch (workers started);
- **training step alone**: ``--model`` forward, backward and an Adam step on one batch already in memory;
- **loader + step**, for each ``--workers`` count: the two together, as a run trains.

The step measurements run interleaved over ``--rounds`` rounds (medians reported), so that a change in the
machine's load hits every side alike.

If the loader alone is faster than the step alone, the loader does not starve the model (the step's images/s
is the ceiling). By default the folder is made here: ``--images`` JPEG files of 500x375 pixels (ImageNet's typical
size; noise and gradients, quality 90) in 10 class folders; ``--root DIR`` times a folder of your own.

    python experiments/benchmarks/bench_image_folder.py                       # 224 crops, resnet18, batch 32
    python experiments/benchmarks/bench_image_folder.py --root fashion_pngs/train --image-size 64 --resize-size 72
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from PIL import Image

import modelforge
from modelforge.data.image_folder import ImageFolderDataModule

RESULTS = Path(__file__).resolve().parent / "results"


def make_jpegs(root: Path, n_images: int, size: tuple[int, int] = (500, 375), n_classes: int = 10) -> None:
    rng = np.random.default_rng(0)
    ramp = np.linspace(0, 255, size[0], dtype=np.float32)[None, :, None]
    for i in range(n_images):
        folder = root / f"class_{i % n_classes}"
        folder.mkdir(parents=True, exist_ok=True)
        pixels = np.clip(ramp * rng.random(3) + rng.normal(0, 40, (size[1], size[0], 3)), 0, 255).astype(np.uint8)
        Image.fromarray(pixels).save(folder / f"{i:05d}.jpg", quality=90)


def loader_rate(data: ImageFolderDataModule, batches: int) -> float:
    """Images/s of the training loader, from its second batch (the first starts the workers) to its last."""
    iterator = iter(data.train_dataloader())
    next(iterator)
    start, seen = time.perf_counter(), 0
    for _, (x, _) in zip(range(batches), iterator):
        seen += len(x)
    return seen / (time.perf_counter() - start)


def step_rate(model: torch.nn.Module, batches, steps: int) -> float:
    """Images/s of forward + backward + Adam step over ``batches`` (an iterable of (x, y)), after one warm-up step."""
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    model.train()

    def step(x: torch.Tensor, y: torch.Tensor) -> None:
        optimizer.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()

    iterator = iter(batches)
    step(*next(iterator))
    start, seen = time.perf_counter(), 0
    for _, (x, y) in zip(range(steps), iterator):
        step(x, y)
        seen += len(x)
    return seen / (time.perf_counter() - start)


def repeat(batch):
    while True:
        yield batch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, help="a folder of class folders (default: JPEGs made here)")
    parser.add_argument("--images", type=int, default=640)
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--resize-size", type=int, default=256)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--workers", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--batches", type=int, default=10, help="loader batches timed")
    parser.add_argument("--steps", type=int, default=4, help="training steps timed, each round")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of the step measurements, interleaved")
    parser.add_argument("--model", default="resnet18")
    parser.add_argument("--note", default="", help="the machine's conditions, recorded with the figures")
    parser.add_argument("--out", type=Path, default=RESULTS / "image_folder.json")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        root = args.root or Path(tmp) / "jpegs"
        if args.root is None:
            make_jpegs(root, args.images)
        options = dict(root=str(root), image_size=args.image_size, resize_size=args.resize_size,
                       batch_size=args.batch_size, val_size=0.1)
        figures: dict[str, float] = {}
        loaders = {}
        for workers in args.workers:
            loaders[workers] = data = ImageFolderDataModule(**options, num_workers=workers)
            data.setup("fit")
            figures[f"loader alone, {workers} workers"] = loader_rate(data, args.batches)
            print(f"loader alone, {workers} workers: {figures[f'loader alone, {workers} workers']:.1f} images/s",
                  flush=True)
        size = [args.image_size, args.image_size]
        model = modelforge.create_model(args.model, ["in_channels=3", f"n_classes={data.n_classes}",
                                                     f"input_size={size}"])
        batch = next(iter(data.train_dataloader()))
        rates: dict[str, list[float]] = {}
        for _ in range(args.rounds):  # the sides interleaved, so that a change in the machine's load hits them all
            rates.setdefault("step alone", []).append(step_rate(model, repeat(batch), args.steps))
            for workers, data in loaders.items():
                rates.setdefault(f"loader + step, {workers} workers", []).append(
                    step_rate(model, data.train_dataloader(), args.steps))
        for side, values in rates.items():
            figures[side] = statistics.median(values)
            print(f"{args.model} {side}: {figures[side]:.1f} images/s (median of {', '.join(f'{v:.1f}' for v in values)})",
                  flush=True)
    record = {"figures_images_per_s": {k: round(v, 1) for k, v in figures.items()},
              "folder": "made here: " + f"{args.images} JPEGs 500x375" if args.root is None else str(args.root),
              "options": {k: v for k, v in vars(args).items() if k not in ("root", "out")},
              "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
                         f"{torch.get_num_threads()} torch threads", "torch": torch.__version__, "note": args.note}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=2) + "\n")
    print(f"written to {args.out}")


if __name__ == "__main__":
    main()

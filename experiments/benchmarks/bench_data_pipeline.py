"""Benchmark: one epoch of MNIST training batches, modelforge's tensor-sliced loader vs a per-sample baseline.

Baseline = what a torchvision-style MNIST pipeline does: a Dataset whose ``__getitem__``
turns one uint8 image into a normalized float tensor, and DataLoader's default collate.
Both read the same 55,000 training images (real MNIST) with batch size 128 and shuffling.

    python experiments/benchmarks/bench_data_pipeline.py [--data-dir ../shared/datasets/mnist] [--epochs 2]
"""

from __future__ import annotations

import argparse
import resource
import time
from pathlib import Path

import torch
from torch.utils.data import DataLoader, Dataset

from modelforge.data import MNISTDataModule

MEAN, STD = 0.1307, 0.3081


class PerSampleMNIST(Dataset):
    """The baseline: one image at a time, converted and normalized in Python."""

    def __init__(self, images: torch.Tensor, labels: torch.Tensor) -> None:
        self.images, self.labels = images, labels

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        x = self.images[i].unsqueeze(0).float().div(255.0)
        return (x - MEAN) / STD, self.labels[i]


def time_epochs(loader: DataLoader, epochs: int) -> tuple[float, int]:
    """Seconds per epoch (best of ``epochs``) and images seen in one epoch."""
    best, seen = float("inf"), 0
    for _ in range(epochs):
        start, seen = time.perf_counter(), 0
        for x, y in loader:
            seen += len(y)
        best = min(best, time.perf_counter() - start)
    return best, seen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default=str(Path(__file__).resolve().parents[2].parent / "shared/datasets/mnist"))
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=128)
    args = parser.parse_args()

    torch.manual_seed(0)
    dm = MNISTDataModule(data_dir=args.data_dir, batch_size=args.batch_size)
    dm.prepare_data()
    dm.setup("fit")
    ours = dm.train_dataloader()
    base_set = PerSampleMNIST(dm.train_set.images, dm.train_set.labels)
    baseline = DataLoader(base_set, batch_size=args.batch_size, shuffle=True)

    # Same first batch content check: both pipelines produce the same normalized values.
    x_ours, _ = dm.train_set.__getitems__(list(range(4)))
    x_base = torch.stack([base_set[i][0] for i in range(4)])
    torch.testing.assert_close(x_ours, x_base)

    rows = []
    for name, loader in (("per-sample baseline", baseline), ("modelforge (tensor slices)", ours)):
        seconds, seen = time_epochs(loader, args.epochs)
        rows.append((name, seconds, seen / seconds))
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"| pipeline | s / epoch ({len(base_set):,} images) | images / s |")
    print("|---|---:|---:|")
    for name, seconds, rate in rows:
        print(f"| {name} | {seconds:.2f} | {rate:,.0f} |")
    print(f"\nspeed-up: {rows[0][1] / rows[1][1]:.1f}x; process peak RSS {peak_mb:.0f} MB; "
          f"torch {torch.__version__}, {torch.get_num_threads()} threads")


if __name__ == "__main__":
    main()

"""The baseline for framework overhead: the fast recipe as a hand-written PyTorch loop.

Same model and initial weights (``build_model`` with the run's seed), same data tensors,
split and batches (``MNISTDataModule``'s loaders), batch size, AdamW + OneCycle stepped
every batch, label smoothing, one validation pass per epoch and a test pass at the end,
as ``python -m modelforge train experiment=fast`` does; no Lightning. Prints one JSON
line: per-epoch seconds (training + validation), fit seconds, test accuracy.

    python experiments/benchmarks/raw_loop.py --data-dir ../shared/datasets/mnist [--epochs 1]
    python experiments/benchmarks/raw_loop.py --device cuda --precision bf16-mixed [--batch-size 512 --lr 3e-2]

On a GPU (``--device cuda``) the data tensors are moved there once, as the data module does in a run, and
``--precision bf16-mixed`` runs forward and loss under ``torch.autocast`` (bfloat16); no host sync inside the
epoch (the evaluation reads its sums once).
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import time
from pathlib import Path

import torch
from omegaconf import OmegaConf

from modelforge import build_model
from modelforge.config import conf_dir
from modelforge.data import MNISTDataModule


def fast_recipe() -> dict:
    """conf/experiment/fast.yaml, its model as a plain ``build_model`` config: conf/model/cnn.yaml's
    own keys (a Hydra defaults list aside, CNN's defaults fill the rest) and the recipe's on top.
    ``run.py`` checks that this builds the same weights as ``train experiment=fast``."""
    recipe = OmegaConf.to_container(OmegaConf.load(conf_dir() / "experiment" / "fast.yaml"))
    model = OmegaConf.to_container(OmegaConf.load(conf_dir() / "model" / "cnn.yaml"))
    model.pop("defaults", None)
    model.update(enc_sizes=recipe["enc_sizes"], dec_sizes=recipe["dec_sizes"], **recipe["model"])
    return {**recipe, "model": model}


def evaluate(model: torch.nn.Module, loader, loss_fn, limit: int | None, autocast) -> tuple[float, float]:
    """Mean loss and accuracy over ``loader`` (inference mode, eval mode)."""
    model.eval()
    device = next(model.parameters()).device
    loss_sum, correct, seen = torch.zeros((), device=device), torch.zeros((), dtype=torch.long, device=device), 0
    with torch.inference_mode():
        for x, y in itertools.islice(loader, limit):
            with autocast():
                logits = model(x)
                loss = loss_fn(logits, y)
            loss_sum += loss.float() * len(y)
            correct += (logits.argmax(1) == y).sum()
            seen += len(y)
    model.train()
    return float(loss_sum) / max(seen, 1), float(correct) / max(seen, 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--epochs", type=int, default=None, help="default: the recipe's (1)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--limit-train-batches", type=int, default=None)
    parser.add_argument("--limit-val-batches", type=int, default=None)
    parser.add_argument("--limit-test-batches", type=int, default=None)
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument("--precision", default="32-true", choices=("32-true", "bf16-mixed"))
    parser.add_argument("--batch-size", type=int, default=None, help="default: the recipe's (32)")
    parser.add_argument("--lr", type=float, default=None, help="one-cycle's peak; default: the recipe's")
    args = parser.parse_args()

    recipe = fast_recipe()
    epochs = args.epochs or recipe["trainer"]["max_epochs"]
    device = torch.device(args.device)
    random.seed(args.seed)
    torch.manual_seed(args.seed)  # as pl.seed_everything: the shuffling order
    data = MNISTDataModule(data_dir=args.data_dir, batch_size=args.batch_size or recipe["data"]["batch_size"],
                           seed=args.seed)
    data.setup("fit")
    for split in (data.train_set, data.val_set, data.test_set):
        split.to(device)  # as the data module does on a run's device
    train_loader, val_loader, test_loader = data.train_dataloader(), data.val_dataloader(), data.test_dataloader()
    model = build_model(recipe["model"], seed=args.seed).to(device)
    loss_fn = torch.nn.CrossEntropyLoss(label_smoothing=recipe["label_smoothing"])
    optim, sched = recipe["optim"], recipe["sched"]
    optim["lr"] = args.lr or optim["lr"]
    optimizer = torch.optim.AdamW(model.parameters(), lr=optim["lr"], weight_decay=optim["weight_decay"])

    def autocast():
        return torch.autocast(device.type, dtype=torch.bfloat16, enabled=args.precision == "bf16-mixed")

    steps_per_epoch = min(len(train_loader), args.limit_train_batches or len(train_loader))
    scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=optim["lr"] * (sched.get("max_lr_factor") or 1.0),
                                                    total_steps=epochs * steps_per_epoch,
                                                    pct_start=sched["pct_start"])

    epoch_s = []
    started = time.perf_counter()
    for _ in range(epochs):
        epoch_start = time.perf_counter()
        model.train()
        for x, y in itertools.islice(train_loader, steps_per_epoch):
            with autocast():
                loss = loss_fn(model(x), y)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            scheduler.step()
        val_loss, val_acc = evaluate(model, val_loader, loss_fn, args.limit_val_batches, autocast)  # syncs
        epoch_s.append(time.perf_counter() - epoch_start)
    fit_s = time.perf_counter() - started
    test_loss, test_acc = evaluate(model, test_loader, loss_fn, args.limit_test_batches, autocast)
    print(json.dumps({"epoch_s": epoch_s, "fit_s": fit_s, "val/acc": val_acc, "test/acc": test_acc,
                      "steps": epochs * steps_per_epoch, "data_dir": str(Path(data.data_dir or "").absolute())}))


if __name__ == "__main__":
    main()

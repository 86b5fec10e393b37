"""Host syncs in modelforge's training steps on a CUDA GPU, as torch's sync debug mode reports them.

    python experiments/benchmarks/gpu_host_syncs.py [--data-dir DIR] [--steps 60] [--every 20] [override ...]

A sync makes the host wait until the GPU has run everything queued so far, so the next step
cannot be queued while this one runs: on a small model it is the difference between the GPU's
time per step and the GPU's plus the host's. This runs ``train`` of the fast recipe (any extra
override after the options) for ``--steps`` training batches with a callback that sets
``torch.cuda.set_sync_debug_mode("warn")`` once warm-up is over (after batch ``WARMUP_STEPS``, the
one a ``cuda_graph=true`` run captures: eager and captured runs count the same steps) and clears it
when validation starts, and records each synchronizing operation with the code that called it
(torch does not report waiting on an event, as the divergence guard does for the previous step's
loss). ``--every`` is ``trainer.log_every_n_steps``: how often the step loss is logged and a
captured run copies its divergence flag to the host, so both happen inside the counted steps and
any sync they cost is counted. No bar. Prints one JSON line:
``{"steps_checked": N, "syncs": K, "where": [{"count": c, "stack": "..."}, ...]}``.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import io
import json
import tempfile
import traceback
import warnings
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch

from modelforge.registry import CALLBACKS
from modelforge.train.captured_step import WARMUP_STEPS

SYNC_WARNING = "called a synchronizing CUDA operation"  # torch's text (c10/cuda/CUDAFunctions.cpp)
STACK_FRAMES = 6  # of the caller's stack, innermost last: enough to name the line in modelforge or Lightning
COUNTERS: list[HostSyncCounter] = []  # every counter a run built from its config, in order


@CALLBACKS.register("bench_host_syncs")
class HostSyncCounter(pl.Callback):
    """Counts synchronizing CUDA operations from the end of warm-up (and a captured run's capture) to validation."""

    def __init__(self) -> None:
        self.stacks: collections.Counter[str] = collections.Counter()
        self.steps_checked = 0
        self._show = warnings.showwarning
        self._on = False
        COUNTERS.append(self)

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        if batch_idx == WARMUP_STEPS and not self._on:  # warm-up and the capture allocate: not the steady state
            warnings.filterwarnings("always", message=SYNC_WARNING)
            self._show = warnings.showwarning  # whatever the run installed (e.g. logging's capture)
            warnings.showwarning = self._record
            torch.cuda.set_sync_debug_mode("warn")
            self._on = True
        elif self._on:
            self.steps_checked += 1

    # Validation and the epoch's checkpoint come before on_train_epoch_end: not training steps.
    def on_validation_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._off()

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._off()

    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None:
        self._off()

    def _off(self) -> None:
        if self._on:
            torch.cuda.set_sync_debug_mode(0)
            warnings.showwarning = self._show
            self._on = False

    def _record(self, message: Any, category: Any, filename: str, lineno: int, file: Any = None,
                line: Any = None) -> None:
        if SYNC_WARNING not in str(message):
            self._show(message, category, filename, lineno, file, line)
            return
        frames = [f for f in traceback.extract_stack() if f.filename not in (__file__, warnings.__file__)]
        frames = frames[-STACK_FRAMES:]
        self.stacks["".join(traceback.format_list(frames))] += 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--every", type=int, default=20, help="trainer.log_every_n_steps (and the divergence copy's "
                        "interval in a captured run)")
    parser.add_argument("overrides", nargs="*", help="more overrides of the train config, e.g. data.batch_size=512")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print(json.dumps({"skipped": "no CUDA device"}))
        return

    from hydra import compose, initialize_config_dir

    from modelforge.config import conf_dir
    from modelforge.train import train

    overrides = ["experiment=fast", "trainer.accelerator=gpu", "trainer.max_epochs=1",
                 f"trainer.limit_train_batches={args.steps}", "trainer.limit_val_batches=2",
                 "trainer.limit_test_batches=2", f"trainer.log_every_n_steps={args.every}",
                 "trainer.enable_progress_bar=false", "+callbacks.bench_host_syncs={}",
                 *([f"data.data_dir={args.data_dir}"] if args.data_dir else []), *args.overrides]
    with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
        cfg = compose("train", overrides=overrides)
    with contextlib.redirect_stdout(io.StringIO()):  # the run's metrics table
        train(cfg, run_dir=Path(tempfile.mkdtemp(prefix="mf_host_syncs_")))
    found = COUNTERS[-1]
    print(json.dumps({"overrides": overrides, "steps_checked": found.steps_checked,
                      "syncs": sum(found.stacks.values()),
                      "where": [{"count": n, "stack": s} for s, n in found.stacks.most_common(5)]}))


if __name__ == "__main__":
    main()

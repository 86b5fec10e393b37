"""``cuda_graph=true``: the whole training step (forward, loss, backward, gradient clipping, optimizer update and the
epoch's loss and accuracy sums) captured once into a CUDA graph and replayed for every batch.

On a GPU a small model's step is launch-bound: the CPU's time issuing some hundred kernels and running Lightning's
per-step Python is the step's time. A replay issues them all in one call (torch's "whole network capture"). What a
replay needs, and how it gets it:

- static shapes and addresses: each batch is copied into one input buffer (the ragged last training batch of an
  epoch is left out: ``data.drop_last``); gradients are allocated inside the graph (``zero_grad(set_to_none=True)``
  before capture) and overwritten by every replay;
- an optimizer that keeps its step count on the GPU (Adam, AdamW: ``capturable``; SGD: ``fused``) and reads the
  learning rate from a GPU tensor: the schedule still steps on the host, and each replay is preceded by a copy of
  the current value into that tensor (one tiny kernel a group). Only the learning rate can move: torch's Adam reads
  a tensor beta1 as a host number (``_foreach_lerp_`` and ``_foreach_pow`` take it as a Scalar: a sync, which
  capture forbids), and fused SGD takes its momentum as a number, so a schedule that cycles the momentum
  (one-cycle's default) is refused, with ``sched.cycle_momentum=false`` as the way out;
- no host sync inside the epoch: the loss sum, correct count and the first bad (non-finite or too large) loss are
  kept on the GPU by the graph, and read once per epoch; the divergence flag is copied asynchronously every
  ``check_every`` steps and read when the copy is done.

Warm-up: the first :data:`WARMUP_STEPS` batches of a fit train eagerly on a side stream (cuDNN picks its
algorithms, the optimizer makes its state), then the graph is captured on the next batch and replayed from then on.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytorch_lightning as pl
import torch
from pytorch_lightning.utilities import GradClipAlgorithmType
from torch import Tensor, nn

WARMUP_STEPS = 3
CAPTURABLE = (torch.optim.Adam, torch.optim.AdamW)  # step count on the device; lr as a device tensor
SUPPORTED = (*CAPTURABLE, torch.optim.SGD)  # SGD: no step count; fused, its lr read as a device tensor
# The group flags this step sets (and a checkpoint gets back as the optimizer was built: resumable without a graph).
DEVICE_FLAGS = ("capturable", "foreach", "fused")


@dataclass(frozen=True)
class StepSpec:
    """What the captured step computes besides forward and backward."""

    autocast_dtype: torch.dtype | None = None  # bf16-mixed: torch.bfloat16
    clip_value: float | None = None  # trainer.gradient_clip_val; None: no clipping
    clip_algorithm: str = "norm"  # trainer.gradient_clip_algorithm: norm or value
    max_loss: float | None = None  # divergence.max_loss: a larger (or non-finite) loss marks the step bad

    @classmethod
    def of_trainer(cls, trainer: pl.Trainer, max_loss: float | None = None) -> StepSpec:
        """What Lightning's own step would do under ``trainer``: autocast for bf16-mixed, and its clipping rule
        (a value <= 0 or None clips nothing; the algorithm is Lightning's ``GradClipAlgorithmType``, whose
        ``str()`` is ``'GradClipAlgorithmType.VALUE'``: compared by value, never by its string)."""
        clip = trainer.gradient_clip_val
        algorithm = GradClipAlgorithmType(trainer.gradient_clip_algorithm or GradClipAlgorithmType.NORM)
        return cls(autocast_dtype=torch.bfloat16 if str(trainer.precision) == "bf16-mixed" else None,
                   clip_value=float(clip) if clip is not None and clip > 0 else None,
                   clip_algorithm=algorithm.value, max_loss=max_loss)


class CapturedStep:
    """The training step of ``model`` under ``loss_fn`` and ``optimizer``, captured on first use after warm-up.

    ``capture=False`` runs the same step eagerly each time, through the same buffers and device-side sums: what the
    tests check on a CPU (capture itself needs CUDA), and what a replay computes. The optimizer gets the flags a
    capture needs wherever torch takes them: fused SGD with a tensor lr on any device, capturable Adam on CUDA only
    (torch 2.13 refuses it on a CPU, where Adam reads the tensor lr on its single-tensor path).
    """

    def __init__(self, model: nn.Module, loss_fn: Callable[[Tensor, Tensor], Tensor], optimizer: torch.optim.Optimizer,
                 spec: StepSpec, first_step: int = 0, capture: bool = True, check_every: int = 50) -> None:
        self.model, self.loss_fn, self.optimizer, self.spec = model, loss_fn, optimizer, spec
        self.capture, self.check_every = capture, max(int(check_every), 1)
        self.device = next(model.parameters()).device
        self.params = [p for group in optimizer.param_groups for p in group["params"] if p.requires_grad]
        self.graph: torch.cuda.CUDAGraph | None = None
        self.steps_run = 0  # this fit's steps through this object: warm-up, capture, replays
        self._x: Tensor | None = None  # static input and target, made at the first batch
        self._y: Tensor | None = None
        self.loss: Tensor | None = None  # the latest step's loss (static output of the graph)
        # Device-side state the graph updates.
        zeros = dict(device=self.device)
        self.loss_sum = torch.zeros((), dtype=torch.float32, **zeros)
        self.correct = torch.zeros((), dtype=torch.int64, **zeros)
        self.step_index = torch.full((), int(first_step), dtype=torch.int64, **zeros)
        self.bad_step = torch.full((), -1, dtype=torch.int64, **zeros)
        self.bad_loss = torch.zeros((), dtype=torch.float32, **zeros)
        self.seen = 0  # samples this epoch (host: batch sizes are static)
        # Hyperparameters a schedule moves, as device tensors the optimizer reads while captured.
        self._lr = [torch.tensor(float(g["lr"]), dtype=torch.float32, **zeros) for g in optimizer.param_groups]
        self._pending: tuple[Tensor, torch.cuda.Event] | None = None  # an async copy of (bad_step, bad_loss)
        self._built_flags = [{k: g.get(k) for k in DEVICE_FLAGS} for g in optimizer.param_groups]
        self._use_device_flags()

    def _use_device_flags(self) -> None:
        capturable = self.device.type == "cuda"  # torch 2.13 takes capturable=True on no CPU
        for group in self.optimizer.param_groups:
            if not isinstance(self.optimizer, CAPTURABLE):  # SGD: its foreach path reads a tensor lr as a host
                group["foreach"], group["fused"] = False, True  # number (a sync); the fused kernel reads it
            elif capturable:
                group["capturable"] = True  # step counts on the device, and a tensor lr read there
        for state in self.optimizer.state.values():  # a resumed run's step counts were saved on the CPU
            if capturable and isinstance(state.get("step"), Tensor):
                state["step"] = state["step"].to(self.device, dtype=torch.float32)

    def portable_state(self, saved: dict[str, Any]) -> dict[str, Any]:
        """``optimizer.state_dict()`` as a plain optimizer saves itself (its flags as built, step counts on the
        CPU), so that a run resumes from it with or without a graph. A new dict: torch's state_dict hands out the
        optimizer's own per-parameter dicts, and a live step count replaced there would leave the graph
        incrementing one the optimizer no longer holds."""
        built = self._built_flags + [{}] * (len(saved["param_groups"]) - len(self._built_flags))
        groups = [{**group, **flags} for group, flags in zip(saved["param_groups"], built)]
        state = {key: {name: value.detach().to("cpu", copy=True) if name == "step" and isinstance(value, Tensor)
                       else value for name, value in per_param.items()}
                 for key, per_param in saved["state"].items()}
        return {**saved, "state": state, "param_groups": groups}

    @contextlib.contextmanager
    def _device_hyperparameters(self) -> Iterator[None]:
        """While the optimizer steps (eagerly or being captured), its groups hold the device tensors; the host values
        the schedule set are copied into them first, and put back after, for the schedule and the LR monitor."""
        groups = self.optimizer.param_groups
        saved = [g["lr"] for g in groups]
        self.sync_hyperparameters()
        for group, lr in zip(groups, self._lr):
            group["lr"] = lr
        try:
            yield
        finally:
            for group, lr in zip(groups, saved):
                group["lr"] = lr

    def sync_hyperparameters(self) -> None:
        """Copy the schedule's current host values into the device tensors the graph reads (no host sync)."""
        for group, lr in zip(self.optimizer.param_groups, self._lr):
            lr.fill_(float(group["lr"]))

    def _body(self) -> None:
        """One step on the static buffers: what is captured, and what warm-up and ``capture=False`` run."""
        x, y, spec = self._x, self._y, self.spec
        autocast = (torch.autocast(self.device.type, dtype=spec.autocast_dtype, cache_enabled=False)
                    if spec.autocast_dtype is not None else contextlib.nullcontext())
        with autocast:
            logits = self.model(x)
            loss = self.loss_fn(logits, y)
        with torch.autocast(self.device.type, enabled=False):  # backward and update outside autocast, as Lightning
            loss.backward()
            if spec.clip_value is not None:
                if spec.clip_algorithm == "value":
                    nn.utils.clip_grad_value_(self.params, spec.clip_value, foreach=True)
                else:
                    nn.utils.clip_grad_norm_(self.params, spec.clip_value, foreach=True)
            self.optimizer.step()
            detached = loss.detach().float()
            self.loss_sum.add_(detached, alpha=len(y))
            self.correct.add_((logits.detach().argmax(1) == y).sum())
            bad = ~torch.isfinite(detached)
            if spec.max_loss is not None:
                bad |= detached > spec.max_loss
            first = bad & (self.bad_step < 0)
            self.bad_step.copy_(torch.where(first, self.step_index, self.bad_step))
            self.bad_loss.copy_(torch.where(first, detached, self.bad_loss))
            self.step_index.add_(1)
        self.loss = detached

    def step(self, x: Tensor, y: Tensor) -> Tensor:
        """Train on one batch: warm-up, capture or replay. Returns the (static) loss tensor of this step."""
        if self._x is None:
            self._x, self._y = torch.empty_like(x), torch.empty_like(y)
        if x.shape != self._x.shape:
            raise ValueError(f"cuda_graph: a training batch of shape {list(x.shape)}, the graph's is "
                             f"{list(self._x.shape)} (the ragged last batch is left out: data.drop_last)")
        self._x.copy_(x, non_blocking=True)
        self._y.copy_(y, non_blocking=True)
        self.steps_run += 1
        if self.graph is not None:
            self.sync_hyperparameters()
            self.graph.replay()
        elif not self.capture:
            self.optimizer.zero_grad(set_to_none=True)
            with self._device_hyperparameters():
                self._body()
        elif self.steps_run <= WARMUP_STEPS:
            self._warm_up()
        else:
            self._capture()
            self.sync_hyperparameters()
            self.graph.replay()  # capturing records the kernels without running them
        return self.loss

    def _warm_up(self) -> None:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            self.optimizer.zero_grad(set_to_none=True)
            with self._device_hyperparameters():
                self._body()
        torch.cuda.current_stream().wait_stream(side)

    def _capture(self) -> None:
        graph = torch.cuda.CUDAGraph()
        self.optimizer.zero_grad(set_to_none=True)  # the graph allocates the gradients from its own pool
        with self._device_hyperparameters(), torch.cuda.graph(graph):
            self._body()
        self.graph = graph

    def start_epoch(self) -> None:
        """Zero the epoch's device-side sums (outside the graph: two tiny kernels an epoch)."""
        self.loss_sum.zero_()
        self.correct.zero_()
        self.seen = 0

    def count(self, batch_size: int) -> None:
        self.seen += batch_size

    def bad(self, block: bool) -> tuple[int, float] | None:
        """The first bad step and its loss, once known; ``block``: wait for the device (else only a finished copy
        is read, and a new one is queued every ``check_every`` steps)."""
        if block:
            step = int(self.bad_step)
            return (step, float(self.bad_loss)) if step >= 0 else None
        if self._pending is not None and self._pending[1].query():
            host, self._pending = self._pending[0], None
            if host[0] >= 0:
                return int(host[0]), float(host[1])
        if self._pending is None and self.device.type == "cuda" and self.steps_run % self.check_every == 0:
            host = torch.empty(2, dtype=torch.float64, pin_memory=True)
            host.copy_(torch.stack([self.bad_step.double(), self.bad_loss.double()]), non_blocking=True)
            done = torch.cuda.Event()
            done.record()
            self._pending = (host, done)
        return None

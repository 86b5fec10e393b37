"""What ``cuda_graph=true`` refuses before any work: what a replayed step cannot do, one error each, saying why.

A replay runs the kernels captured once, on the tensors captured once, on one GPU. So it refuses: Python that runs
at every step (hook plugins, SWA's batch-norm pass and step skipping), a host read inside the step (float16 loss
scaling), anything that is not one optimizer update per batch (gradient accumulation), another GPU or process
(several devices, DDP), an optimizer that cannot step with a tensor lr on the device, a schedule that moves the
momentum (the optimizer reads it as a host number: a replay keeps the captured value), and a training set with no
full batch (the ragged last batch is left out, so no step would be taken).
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from typing import Any, NoReturn

import torch
from pytorch_lightning.accelerators import CUDAAccelerator
from torch import nn

from modelforge.config import signature_defaults
from modelforge.errors import ConfigError
from modelforge.train.captured_step import SUPPORTED
from modelforge.train.optim import OptimPlan, build_optimizer, build_scheduler, lightning_settings

# Hook plugins whose hooks are tensor ops only (a replay runs them); the others run Python at every step.
CAPTURABLE_PLUGINS = ("grad_clip",)
MOMENTUM_STEPS = 3  # schedule steps the momentum check takes on a throwaway optimizer


def refuse(why: str, hint: str) -> NoReturn:
    raise ConfigError("cuda_graph", why, hint=hint)


def check_one_device(trainer: Mapping[str, Any]) -> None:
    """One GPU, one process: refused before Lightning's own checks, so ``devices=-1`` or ``"0,1"`` on any machine
    get this line. ``devices=auto`` (the default) counts the GPUs Lightning would pick here."""
    devices, nodes, strategy = trainer.get("devices", "auto"), trainer.get("num_nodes") or 1, trainer.get("strategy")
    hint = "trainer.devices=1, or leave out cuda_graph for DDP"
    on_gpu = str(trainer.get("accelerator") or "auto") in ("auto", "gpu", "cuda") and torch.cuda.is_available()
    several = several_devices(devices, CUDAAccelerator.auto_device_count() if on_gpu else 1)
    if several is not None:
        refuse(f"trainer.devices={devices} asks for {several}: a captured step trains on one GPU in one process "
               "(Lightning would start DDP, and the graph would run the module without its all-reduce)", hint)
    if isinstance(nodes, int) and nodes > 1:
        refuse(f"trainer.num_nodes={nodes}: a captured step trains on one GPU in one process", hint)
    if "ddp" in str(strategy or "") or "fsdp" in str(strategy or ""):
        refuse(f"trainer.strategy={strategy}: a captured step trains on one GPU in one process", hint)


def several_devices(devices: Any, auto_count: int) -> str | None:
    """How ``devices`` asks for more than one device, in words (None: one). Lightning's forms: a count, -1 (all),
    a list of indices, a string of either, or auto (``auto_count``: every GPU where the accelerator is a GPU,
    else one)."""
    if isinstance(devices, str):
        text = devices.strip()
        if text == "auto":
            return f"every GPU of this machine ({auto_count})" if auto_count > 1 else None
        if "," in text:
            devices = [part for part in text.split(",") if part.strip()]
        elif text.lstrip("-").isdigit():
            devices = int(text)
        else:
            return None  # not a form Lightning takes: its own check says so
    if isinstance(devices, bool):
        return None
    if isinstance(devices, int):
        return "every device" if devices == -1 else f"{devices} devices" if devices > 1 else None
    if isinstance(devices, (list, tuple)) and len(devices) > 1:
        return f"{len(devices)} devices"
    return None


def check_cuda_graph(compiled: bool, plugins: Sequence[Any], averaging: Sequence[tuple[str, str]],
                     trainer: Mapping[str, Any], optim: OptimPlan, datamodule: Any = None,
                     batch_size: Any = None) -> None:
    """Refuse, before any work, what a captured step cannot replay: with ``compiled``, the ``plugins``, the weight
    ``averaging`` callbacks (name, EMA or SWA), the checked ``trainer`` options and ``optim`` plan, and a training set
    of ``datamodule`` with no full batch of ``batch_size`` (:func:`check_one_device` runs with the trainer's plan)."""
    if compiled:
        refuse("cannot be combined with compile=true", "compile_mode=reduce-overhead captures compiled graphs instead")
    for plugin in plugins:
        if plugin.name not in CAPTURABLE_PLUGINS:
            refuse(f"hook plugin {plugin.name!r} runs Python at every step, which a replayed graph leaves out",
                   f"drop hooks.{plugin.name} or cuda_graph (plugins a graph can hold: {', '.join(CAPTURABLE_PLUGINS)})")
    for name, kind in averaging:
        if kind == "SWA":
            refuse(f"callbacks.{name} (stochastic weight averaging) puts new tensors in place of batch norm's running "
                   "statistics, which the graph would go on updating, and takes no optimizer step in its batch-norm "
                   "pass, where a replay would step", "callbacks=[ema] (it averages in place), or leave out cuda_graph")
    if str(trainer.get("precision")) in ("16-mixed", "16"):
        refuse("float16 loss scaling checks for inf on the host at every step",
               "trainer.precision=bf16-mixed (no scaler) or 32-true")
    if (trainer.get("accumulate_grad_batches") or 1) != 1:
        refuse(f"trainer.accumulate_grad_batches={trainer['accumulate_grad_batches']}: a captured step updates the "
               "weights at every batch", "a larger data.batch_size instead")
    if not issubclass(optim.kind, SUPPORTED):
        refuse(f"{optim.kind.__name__} cannot step inside a CUDA graph with a scheduled learning rate",
               f"optim._target_ one of {', '.join(f'torch.optim.{c.__name__}' for c in SUPPORTED)}")
    _check_momentum_stays(optim.optim, optim.sched, optim.kind.__name__)
    _check_full_batch(datamodule, batch_size)


def _check_momentum_stays(optim_cfg: Mapping[str, Any], sched_cfg: Mapping[str, Any] | None, optimizer: str) -> None:
    """Refuse a schedule that moves the momentum (one-cycle's and CyclicLR's default): found by stepping it a few
    times on a throwaway optimizer of the run's kind, whatever the schedule is called."""
    probe = build_optimizer(nn.Linear(2, 2, bias=False), {**optim_cfg, "param_groups": None})
    scheduler = build_scheduler(probe, sched_cfg, total_steps=100, lr=probe.defaults["lr"])
    if scheduler is None or isinstance(scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau):
        return  # constant, or moved by a metric: the lr only

    def momenta() -> list[tuple[Any, Any]]:
        return [(g.get("momentum"), (g.get("betas") or (None,))[0]) for g in probe.param_groups]

    before = momenta()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "lr_scheduler.step() before optimizer.step()": no training here
        for _ in range(MOMENTUM_STEPS):
            scheduler.step()
    moved = [what for was, now in zip(before, momenta())
             for what, a, b in (("momentum", was[0], now[0]), ("beta1", was[1], now[1])) if a != b]
    if moved:
        name = "one-cycle" if isinstance(scheduler, torch.optim.lr_scheduler.OneCycleLR) else type(scheduler).__name__
        hint = ("sched.cycle_momentum=false (as experiment=speedrun), or leave out cuda_graph"
                if "cycle_momentum" in signature_defaults(type(scheduler)) else
                "a schedule that moves only the learning rate, or leave out cuda_graph")
        interval = lightning_settings(sched_cfg)["interval"]  # when Lightning steps it: every step or epoch
        refuse(f"{name} moves {optimizer}'s {moved[0]} at every {interval}, and a replayed step keeps the value it "
               "was captured with (torch's optimizers read it as a host number)", hint)


def _check_full_batch(datamodule: Any, batch_size: Any) -> None:
    """The ragged last batch is left out (``data.drop_last``): a training set smaller than one batch trains 0
    steps. Sizes from the data module's own check (its files are read once, and kept), where it has one."""
    check = getattr(datamodule, "check", None)
    if not callable(check) or not isinstance(batch_size, int):
        return
    n_train = check()["train"]
    if batch_size > n_train:
        raise ConfigError("data.batch_size", f"{batch_size} is more than the {n_train} training images, and "
                          "cuda_graph=true leaves out the ragged last batch (data.drop_last): no step would be "
                          "taken", allowed=f"1..{n_train} with cuda_graph=true")

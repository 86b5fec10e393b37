"""One typed run config, validated once, before any work: what ``train()`` hands to the builders.

The model is built here too (building checks a graph's widths and shapes), once, and given ``init.from``'s
weights and ``freeze`` (transfer.py): ``train()`` trains that module. Nothing is written, so the CLI runs it
before Hydra creates the run directory.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
from omegaconf import DictConfig
from torch import nn

from modelforge.build import build_checked_model, model_label
from modelforge.config import (
    MODEL_SHORTCUTS,
    check_top_level_keys,
    load_config,
    load_yaml_file,
    require_probability,
    train_keys,
    typed_train_config,
)
from modelforge.data.build import resolved_data_options
from modelforge.data.shapes import explicit_model_keys
from modelforge.errors import CheckpointError, ConfigError, UnknownNameError, allocation_errors
from modelforge.hooks import HookPlugin, build_hook_plugins
from modelforge.train.callbacks import CallbacksPlan
from modelforge.train.checkpoints import resume_checkpoint
from modelforge.train.compiled import CompilePlan
from modelforge.train.context import RunContext
from modelforge.train.cuda_graph_checks import check_cuda_graph
from modelforge.train.model_plan import ModelPlan
from modelforge.train.optim import OptimPlan
from modelforge.train.stopping import Divergence
from modelforge.tasks import Task, build_task, task_monitors
from modelforge.train.trainer import TrainerPlan, build_datamodule
from modelforge.train.transfer import Transfer, TransferPlan, apply_transfer

# What ClassifierModule logs at each validation of a classifier: what picks the best checkpoint, and what
# train() returns for sweepers (another task's: tasks.task_monitors).
MONITORED_METRICS = task_monitors(Task())


@dataclass(frozen=True)
class RunConfig:
    """A checked ``train`` config and the objects built from it."""

    config: dict[str, Any]  # plain, shortcuts merged into "model": what config.yaml and checkpoints store
    model: Any  # the model config as validate_model_config returned it
    network: nn.Module  # built from ``model`` with ``seed`` (same seed, same weights)
    plugins: list[HookPlugin]
    datamodule: pl.LightningDataModule
    seed: int | None
    monitor: str
    label_smoothing: float
    channels_last: bool
    compile: bool
    ckpt_path: str | None  # the checkpoint file resumed from (a run directory given: its last.ckpt)
    checkpoint: dict[str, Any] | None = None  # ckpt_path's contents, read and checked against this run
    transfer: Transfer = field(default_factory=Transfer)  # init.from loaded, freeze applied to ``network``
    compile_backend: str = "inductor"
    compile_mode: str | None = None
    cuda_graph: bool = False
    task: Task = field(default_factory=Task)  # what the model learns: classify unless the config's task says


def validate_run_config(cfg: RunConfig | Mapping[str, Any] | DictConfig,
                        context: RunContext = RunContext()) -> RunConfig:
    """Check a whole run config; a RunConfig is returned as is (it was checked when made). The top-level keys
    take TrainConfig's defaults and types (as at composition); here and in the builders, what types cannot say.
    ``context``: the command line's overrides (model keys set on purpose) and the model's files (errors' file:line)."""
    if isinstance(cfg, RunConfig):
        return cfg
    raw = load_yaml_file(cfg) if isinstance(cfg, (str, Path)) else cfg
    check_top_level_keys(raw, train_keys(), "train")
    plain = typed_train_config(load_config(raw))
    seed, monitor, ckpt_path, label_smoothing = (plain[k] for k in ("seed", "monitor", "ckpt_path", "label_smoothing"))
    require_probability(label_smoothing, "label_smoothing")
    task = build_task(plain.get("task"))
    if "monitor" not in raw:  # a config of the caller's without one: the task's main metric
        plain["monitor"] = monitor = f"val/{task.main}"
    if monitor not in (monitors := task_monitors(task)):
        raise UnknownNameError("metric", monitor, monitors, path="monitor")
    if plain["cuda_graph"] and not task.is_classify:  # the captured step counts a classifier's correct labels
        raise ConfigError("cuda_graph", f"a captured step trains a classifier only, not task {task.name!r}",
                          hint="leave cuda_graph=false")
    if ckpt_path is not None and not Path(ckpt_path).expanduser().exists():
        raise CheckpointError(f"ckpt_path: no checkpoint file at {Path(ckpt_path).expanduser()}")
    if plain["cuda_graph"]:  # a captured step has one batch shape: the ragged last training batch is left out
        plain["data"] = {**(plain.get("data") or {}), "drop_last": True}
    datamodule = build_datamodule(plain.get("data") or {})
    plain["data"] = {**(plain.get("data") or {}), **resolved_data_options(datamodule)}  # an image folder's classes
    task.check_data(datamodule)  # segmentation masks for task=segment, ...
    # The model's input shape and class count follow the data unless set (and then must agree).
    model = ModelPlan(plain, datamodule, explicit_model_keys(context.overrides or ()), task, context.model_files)
    plain["model"] = model.config
    for key in MODEL_SHORTCUTS:
        plain[key] = None  # now merged into plain["model"]; the stored config rebuilds as is
    with allocation_errors(model.config, "while building the model"):
        network = build_checked_model(model.checked, seed=seed, files=context.model_files)
    # the builders build any output: the task's, at the data's shapes
    task.check_model(network, datamodule, label=model_label(model.config, context.model_files))
    # Before the optimizer's check: its param_groups see only the parameters left trainable.
    plan = TransferPlan(plain["init"], plain["freeze"], plain["freeze_bn"], plain.get("data"))
    transfer = apply_transfer(plan, network, resuming=ckpt_path is not None)
    optim = OptimPlan(plain.get("optim") or {}, plain.get("sched"), network)
    plugins = build_hook_plugins(plain.get("hooks"), path="hooks")
    task.check_plugins(plugins)
    trainer = TrainerPlan(plain.get("trainer") or {}, one_device=plain["cuda_graph"])
    # What `auto` and a null precision pick here, in config.yaml and the checkpoints: eval tests as the run did.
    plain["trainer"] = trainer.options
    callbacks = CallbacksPlan(plain.get("callbacks"), plain.get("logger"), monitor)
    Divergence((plain["divergence"] or {}).get("max_loss"))
    compiled = CompilePlan(plain["compile"], plain["compile_backend"], plain["compile_mode"],
                           trainer.accelerator)
    # Read and checked here, once (train resumes from what was read): a bad file leaves no run directory.
    ckpt_path, checkpoint = resume_checkpoint(ckpt_path, network, plain) if ckpt_path is not None else (None, None)
    if plain["cuda_graph"]:
        check_cuda_graph(compiled.enabled, plugins, callbacks.averaging, trainer.options, optim, datamodule,
                         (plain.get("data") or {}).get("batch_size"))
    return RunConfig(plain, model.checked, network, plugins, datamodule, seed, monitor, label_smoothing,
                     channels_last=plain["channels_last"], compile=compiled.enabled, ckpt_path=ckpt_path,
                     checkpoint=checkpoint,
                     transfer=transfer, compile_backend=compiled.backend, compile_mode=compiled.mode,
                     cuda_graph=plain["cuda_graph"], task=task)

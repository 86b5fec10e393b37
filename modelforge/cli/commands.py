"""The commands that Hydra runs: ``train``, ``eval``, ``summary``, ``export`` and ``predict`` (``list``: listing.py)."""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from modelforge.build import build_model, model_config_from_run, model_label, naming_definitions
from modelforge.cli.listing import list_names  # noqa: F401  (re-exported)
from modelforge.cli.run_checks import job_context
from modelforge.config import to_plain
from modelforge.hooks import build_hook_plugins
from modelforge.inspect import model_graph, summary
from modelforge.tasks import OUTPUTS, Task, build_task


def train_task(cfg: DictConfig, checked: Any = None) -> float:
    """Train one configuration; the returned metric is what sweepers optimize. ``checked``: the run CheckBeforeRun
    checked, and claimed the directory for, before Hydra made it (None in a sweep's job: train checks and claims)."""
    from modelforge.sweep.pruning import trial_callbacks  # loads Lightning
    from modelforge.train import train

    run_dir, context = job_context(claimed=checked is not None)
    run = cfg if checked is None else checked
    # The sweep attaches its callbacks from here, above both: an Optuna trial's run reports to its trial.
    monitor = run.get("monitor", "val/acc") if isinstance(run, DictConfig) else run.monitor
    job = HydraConfig.get().job.get("num")  # a sweep's job number: which Optuna trial this run reports to
    return train(run, run_dir, callbacks=trial_callbacks(monitor, job), context=context)


def eval_task(cfg: DictConfig, checked: Any = None) -> dict[str, float]:
    """Test a checkpoint; its config, checkpoint and data were checked (``checked``: the plan) before Hydra made the
    run directory."""
    from modelforge.train.run import evaluate  # loads Lightning

    run_dir, context = job_context(claimed=checked is not None)
    return evaluate(cfg if checked is None else checked, run_dir, context=context)


def _imported(module: str, name: str) -> Callable[[DictConfig], Any]:
    """The task ``module.name``, imported when it runs: Lightning and the exporters load only for their commands."""
    return lambda cfg: getattr(importlib.import_module(module), name)(cfg)


class _Shapes(NamedTuple):
    """What a task's output check reads of the data: the input's (C, H, W) and the class count."""

    input_shape: tuple[int, ...]
    n_classes: int | None


def _task_shapes(task: Task, model_cfg: dict[str, Any], data_cfg: Any, overrides: Sequence[str]) -> dict[str, Any]:
    """The model config with the data's input shape and class count where the model leaves them to the data (a
    size given on the command line or in the file is kept). The data module is made, its samples are not read."""
    from modelforge.data.build import build_datamodule  # loads Lightning: a task beyond classification trains with it
    from modelforge.data.shapes import explicit_model_keys, fill_model_shapes

    datamodule = build_datamodule(to_plain(data_cfg))
    task.check_data(datamodule)
    return fill_model_shapes(model_cfg, datamodule, explicit_model_keys(overrides), keep_given=True)


def summary_task(cfg: DictConfig) -> None:
    """Build, attach any hook plugins, run one dummy batch, print the table (and draw the graph if asked)."""
    options = cfg.get("summary") or {}
    if options.get("graph"):
        model_graph.check_picture_path(options["graph"])  # before any work
    context = job_context()[1]
    files = context.model_files  # an error in a composite names its file and line
    task = build_task(cfg.get("task"), metrics=False)  # its output and head; train checks its metrics
    model_cfg = task.choose_head(model_config_from_run(cfg))
    if not task.is_classify:  # the sizes train would build the model at: the data's, where not given
        model_cfg = _task_shapes(task, model_cfg, cfg.get("data") or {}, context.overrides or ())
    plugins = build_hook_plugins(cfg.get("hooks"), path="hooks")
    with naming_definitions(files):
        model = build_model(model_cfg, seed=cfg.seed)
    if not task.is_classify:  # train's check, at the model's sizes: the node and both shapes
        task.check_model(model, _Shapes(model.input_shape, model_cfg.get("n_classes")),
                         label=model_label(model_cfg, files))
    with contextlib.ExitStack() as attached:
        for plugin in plugins:
            attached.enter_context(plugin.attach(model, run_dir=Path.cwd()))
        rows = summary.summarize(model, model.input_shape, batch_size=cfg.batch_size)
    label = model_label(model_cfg, files)  # resnet18, yolov8_cls (scale s): the model file, not "graph"
    print(model, summary.format_summary(model, rows, model.input_shape, expand=bool(options.get("expand")), name=label),
          sep="\n\n")
    if not task.is_classify:
        shape = ", ".join(map(str, getattr(model, "output_shape", None) or ()))
        print(f"Task {task.name}: output [B, {shape}] ({OUTPUTS[task.output][0]})")
    if options.get("graph"):  # summary.graph=model.svg: the module graph, skips drawn as arcs
        drawn = model_graph.draw_model_graph(model, model.input_shape, options["graph"], title=label)
        print(f"module graph written to {Path(drawn).absolute()}")


# eval: the checkpoint's model, tested; export: a checkpoint written and checked against the eager model;
# predict: image files classified with a checkpoint, a run directory or an exported model.
TASKS = {"train": train_task, "eval": eval_task, "summary": summary_task,
         "export": _imported("modelforge.deploy.export", "export_task"),
         "predict": _imported("modelforge.deploy.predict", "predict_task")}

"""The commands: ``train``, ``eval`` and ``summary`` (tasks that Hydra runs) and ``list``."""

from __future__ import annotations

import argparse
import contextlib
import fnmatch
import functools
import importlib
import textwrap
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import yaml
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from modelforge.build import build_model, model_config_from_run, model_label, naming_definitions
from modelforge.cli.run_checks import job_context
from modelforge.config import conf_dir, load_yaml_file, to_plain
from modelforge.errors import UnknownNameError
from modelforge.hooks import build_hook_plugins
from modelforge.inspect import model_graph, summary
from modelforge.registry import REGISTRIES
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
    task = build_task(cfg.get("task"))
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


def list_names(argv: list[str]) -> int:
    """``list [REGISTRY] [GLOB] [--config-dir DIR]``; ``blocks`` adds the composite blocks of conf/ and DIR."""
    parser = argparse.ArgumentParser(prog="python -m modelforge list", description="List registries and their names.")
    parser.add_argument("registry", nargs="?", help=f"one of: {', '.join(REGISTRIES)}")
    parser.add_argument("pattern", nargs="?", default="*", help="glob over names, e.g. 'conv*'")
    parser.add_argument("--config-dir", type=Path, help="a folder of your configs: its blocks/ are listed too")
    args = parser.parse_args(argv)
    if args.registry is not None and args.registry not in REGISTRIES:
        raise UnknownNameError("registry", args.registry, REGISTRIES, path="list")
    lines = []
    for registry in [REGISTRIES[args.registry]] if args.registry else REGISTRIES.values():
        shipped = _shipped_options({"callbacks": "callbacks", "loggers": "logger"}.get(registry.name), args.pattern)
        rows = _table(shipped + [(name, registry.describe(name)) for name in registry.names(args.pattern)])
        lines += [f"{registry.name}: {registry.description}", *(rows or [f"  (no names match {args.pattern!r})"])]
        if registry.name == "blocks" and (composites := _composites([args.config_dir, conf_dir()], args.pattern)):
            lines += ["  composite blocks (a model file's defaults: - /blocks/<file>@blocks):", *_table(composites)]
        if registry.name == "models" and (files := _model_files([args.config_dir, conf_dir()], args.pattern)):
            lines += ["  model files (model=NAME; each builds one of the models above):", *_table(files)]
        lines.append("")
    print("\n".join(lines).rstrip())
    return 0


def _shipped_options(group: str | None, pattern: str) -> list[tuple[str, str]]:
    """The options of conf/callbacks or conf/logger, with the class each instantiates."""
    files = sorted((conf_dir() / group).glob("*.yaml")) if group else []
    return [(f.stem, f"conf/{group}/{f.name}: {yaml.safe_load(f.read_text())['_target_']}")
            for f in files if fnmatch.fnmatch(f.stem, pattern)]


def _table(rows: list[tuple[str, str]], columns: int = 100, name_column: int = 24) -> list[str]:
    """Rows of ``name  about`` in ``columns``: the text wrapped under itself, and a name wider than the name
    column (a composite with its parameters) on a line of its own, its text on the next."""
    width = min(max((len(name) for name, _ in rows), default=0), name_column)
    indent = " " * (width + 4)
    # a path stays whole, even past the columns
    wrap = functools.partial(textwrap.wrap, width=columns, break_on_hyphens=False, break_long_words=False)
    lines = []
    for name, about in rows:
        if len(name) > width:
            lines += [*wrap(name, initial_indent="  ", subsequent_indent="    "),
                      *wrap(about, initial_indent=indent, subsequent_indent=indent)]
        else:
            lines += wrap(f"{name.ljust(width)}  {about}", initial_indent="  ",
                          subsequent_indent=indent) or [f"  {name}"]
    return lines


def _model_files(folders: list[Path | None], pattern: str) -> list[tuple[str, str]]:
    """The options of the model group (conf/model and DIR/model), each with the first sentence of its comment."""
    found: dict[str, tuple[str, str]] = {}
    for folder in (f for f in folders if f):
        for path in sorted((folder / "model").glob("*.yaml")):
            if fnmatch.fnmatchcase(path.stem, pattern) and path.stem not in found:  # the user's folder first
                where = "conf/model" if folder == conf_dir() else str(folder / "model")
                found[path.stem] = (path.stem, f"{_first_sentence(path)} [{where}/{path.name}]")
    return sorted(found.values())


def _first_sentence(path: Path, limit: int = 100) -> str:
    """The first sentence of the comment a YAML file opens with: up to the first ': ' or '. ' outside parentheses
    ("(Liu et al. 2022)" is inside), cut at a word to ``limit`` characters."""
    comment = []
    for line in path.read_text().splitlines():
        if not line.startswith("#"):
            break
        comment.append(line.lstrip("#").strip())
    text, depth = " ".join(comment), 0
    for i, char in enumerate(text):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if depth == 0 and char in ":." and text[i + 1:i + 2] in (" ", ""):
            text = text[:i]
            break
    return text if len(text) <= limit else text[:limit].rsplit(" ", 1)[0] + " ..."


def _composites(folders: list[Path | None], pattern: str) -> list[tuple[str, str]]:  # of blocks/*.yaml
    found = []
    for path in (p for folder in folders if folder for p in sorted((folder / "blocks").glob("*.yaml"))):
        for name, spec in (to_plain(load_yaml_file(path)) or {}).items():
            if isinstance(spec, dict) and fnmatch.fnmatchcase(name, pattern):
                params = ", ".join(k if v == "???" else f"{k}={v}" for k, v in (spec.get("params") or {}).items())
                found.append((f"{name}({params})", f"{spec.get('description', '')} [blocks/{path.name}]"))
    return found

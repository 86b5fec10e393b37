"""``train(cfg)`` and ``evaluate(cfg)``: plain functions that the Hydra commands wrap.

Everything is validated before any work starts (model, optimizer, schedule, hooks, trainer
options, data files, checkpoint); a later failure leaves what was saved and a metrics.json saying so.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
from omegaconf import DictConfig

from modelforge.build import build_model, model_label
from modelforge.config import load_config
from modelforge.data.build import describe_data
from modelforge.deploy.load import check_fits, load_checkpoint, model_weights, resolve_checkpoint
from modelforge.errors import ConfigError, Terminated
from modelforge.files.atomic import write_json, write_yaml
from modelforge.hooks import build_hook_plugins, check_precision
from modelforge.inspect.flops import count_macs
from modelforge.inspect.summary import describe_model
from modelforge.report.confusion_matrix import ConfusionCounts, write_confusion_matrix
from modelforge.report.console import quiet_third_party, run_log
from modelforge.report.learning_curves import write_learning_curves
from modelforge.report.sample_grid import write_sample_grid
from modelforge.report.metrics_table import format_metrics
from modelforge.report.timings import Phases
from modelforge.train import launch
from modelforge.train.averaging import trained_epochs
from modelforge.train.callbacks import early_stop_summary
from modelforge.train.checkpoints import failure_record
from modelforge.files.write_faults import write_fault
from modelforge.train.compiled import CompileCost
from modelforge.train.context import RunContext
from modelforge.train.ddp_teardown import ddp_run_scope
from modelforge.train.eval_config import check_data_fits, eval_data_config, eval_trainer_options
from modelforge.train.module import ClassifierModule
from modelforge.train.provenance import data_fingerprint, environment
from modelforge.train.records import claim_run_dir, current_run_dir, write_metrics
from modelforge.train.run_config import RunConfig, validate_run_config
from modelforge.train.run_report import setup_report
from modelforge.train.stopping import ReceivedSignal, stop_reason, stop_signals
from modelforge.tasks import build_task
from modelforge.train.trainer import (
    build_datamodule,
    build_trainer,
    check_trainer_options,
    describe_device,
)

log = logging.getLogger(__name__)


def _prepare(run: RunConfig, run_dir: Path,
             callbacks: Sequence[pl.Callback] = ()) -> tuple[ClassifierModule, pl.Trainer, dict[str, Any] | None]:
    """The module, the trainer and the checkpoint to resume from, built only after every check passed."""
    ckpt = run.checkpoint  # read and checked with the config (resume_checkpoint)
    model = run.network
    module = ClassifierModule(model, config=run.config, n_classes=getattr(run.datamodule, "n_classes", 10),
                              label_smoothing=run.label_smoothing, channels_last=run.channels_last,
                              compile=run.compile, compile_backend=run.compile_backend, compile_mode=run.compile_mode,
                              cuda_graph=run.cuda_graph)
    for plugin in run.plugins:  # a layer pattern that matches nothing fails now, not at fit time
        plugin.targets(model)
    trainer = build_trainer(run.config, run_dir, run.plugins, extra_callbacks=callbacks)
    trainer.callbacks.extend(run.transfer.callbacks())  # last: their hooks run after a weight-averaging one's
    check_precision(run.plugins, str(trainer.precision))  # e.g. grad_clip refuses fp16 loss scaling
    # Last check, as it may download: verifies (or fetches) the data files before any training.
    run.datamodule.prepare_data()
    return module, trainer, ckpt


def train(cfg: RunConfig | Mapping[str, Any] | DictConfig, run_dir: str | Path | None = None,
          callbacks: Sequence[pl.Callback] = (), context: RunContext = RunContext()) -> float:
    """Train, test the final weights, write ``metrics.json``; return ``cfg.monitor`` (what sweepers optimize).

    ``cfg``: a config composed from ``conf/train.yaml``, or a RunConfig already checked. ``callbacks``: Lightning
    callbacks of the caller's (a sweep's trial pruning); one with a ``run_record()`` method that returns a
    ``status`` ended the run itself (``metrics.json`` gets its record, and the weights are not tested).
    ``context``: how the run was started (the CLI's overrides, ...); the defaults are a run from Python.
    """
    phases = Phases()
    quiet_third_party(launch.global_rank())
    run_dir = (Path(run_dir) if run_dir is not None else current_run_dir()).absolute()
    # SIGTERM/SIGUSR1 stop the run (status terminated, exit 128+signal): at the end of a
    # batch while training, at once before.
    with stop_signals() as received, contextlib.closing(phases):  # the next run's set-up is timed from its end
        with _recorded_setup_failure(run_dir, context, claimed=context.claimed):  # a bad config: no run directory
            run = validate_run_config(cfg, context)
        if not context.claimed:  # atomic, before anything is written there (the CLI claims before Hydra writes)
            claim_run_dir(run_dir, "train", dir_key=context.dir_key)
        # From the CLI, Hydra's job logging writes train.log.
        logging_here = run_log(run_dir / "train.log", launch.global_rank()) if context.writes_log else \
            contextlib.nullcontext()
        with logging_here:
            return _train(run, run_dir, received, callbacks, phases, context)


@contextlib.contextmanager
def _recorded_setup_failure(run_dir: Path, context: RunContext, claimed: bool = True) -> Iterator[None]:
    """A failure before training leaves the run directory (where there is one) a metrics.json saying why.

    Not yet ``claimed``: only into an existing directory this run can claim now, never another run's. Rank 0
    writes it, never creating ``run_dir`` nor replacing a ``metrics.json`` (other DDP ranks fail alike).
    """
    try:
        yield
    except BaseException as exc:
        if not claimed and not _claim_existing(run_dir, context):
            raise
        if launch.global_rank() == 0 and run_dir.is_dir() and not (run_dir / "metrics.json").exists():
            record = _record(run_dir, context)
            del record["config"]  # config.yaml is written only for a config that passed its checks
            # A signal before training: nothing to resume, but say so.
            status = exc.status if isinstance(exc, Terminated) else "failed"
            write_json(run_dir / "metrics.json", {**record, "status": status, "stage": "setup",
                                                  "error": f"{type(exc).__name__}: {exc}"})
        raise


def _claim_existing(run_dir: Path, context: RunContext) -> bool:
    if run_dir.is_dir():
        with contextlib.suppress(ConfigError):
            claim_run_dir(run_dir, "train", dir_key=context.dir_key)
            return True
    return False


def _train(run: RunConfig, run_dir: Path, received: ReceivedSignal, callbacks: Sequence[pl.Callback],
           phases: Phases, context: RunContext) -> float:
    with _recorded_setup_failure(run_dir, context):
        if run.seed is not None:
            pl.seed_everything(run.seed, workers=True, verbose=False)
        module, trainer, ckpt = _prepare(run, run_dir, callbacks)
    model, monitor = module.model, run.monitor
    macs = count_macs(model, model.input_shape)[0]  # per sample; also an objective a search may name
    # Built models know their input shape; the one line replaces Lightning's table.
    label = model_label(run.config["model"], context.model_files)  # resnet18, not graph, from the CLI
    log.info("model %s", describe_model(model, model.input_shape, label, macs=macs))
    device = describe_device(trainer)
    log.info("device: %s (%s) x%d, precision %s", device["accelerator"], device["name"], device["devices"],
             device["precision"])
    setup_lines, setup_record = setup_report(run)  # init.from, freeze, the optimizer's groups, weight averaging
    for line in setup_lines:
        log.info(line)
    metrics: dict[str, Any] = {"status": "running", **_record(run_dir, context),
                               "params": sum(p.numel() for p in model.parameters()), "macs": macs,
                               "monitor": monitor, "data": describe_data(run.datamodule), "device": device,
                               # what `diff` compares besides the config: the data files read, the software
                               "data_files": data_fingerprint(run.datamodule), "environment": environment(),
                               **setup_record}
    if trainer.is_global_zero:
        write_yaml(run_dir / "config.yaml", run.config)
    start_epoch = int(ckpt.get("epoch", -1)) + 1 if ckpt else 0
    compiling = CompileCost().start() if run.compile else None
    phases.end("prepare")  # checks left to train(), the trainer and module, the data files, config.yaml
    started = time.perf_counter()
    with ddp_run_scope(trainer):  # every rank ends its process group; rank 0 reaps the others
        try:
            trainer.fit(module, datamodule=run.datamodule, ckpt_path=run.ckpt_path, weights_only=True)
            metrics["train_time_s"] = round(time.perf_counter() - started, 2)
            phases.end("fit")
            if compiling is not None:  # the graphs of this fit, and the seconds compiling them took within train_time_s
                metrics["compile"] = compiling.record()
                log.info("compile: %d graph(s) in %.1f s (torch.compile, %s)", metrics["compile"]["graphs"],
                         metrics["compile"]["seconds"], run.compile_backend)
            metrics.update({k: float(v) for k, v in trainer.callback_metrics.items() if k.startswith("val/")},
                           **early_stop_summary(trainer))
            if trainer.checkpoint_callback is not None and trainer.checkpoint_callback.best_model_score is not None:
                metrics[f"best_{monitor}"] = float(trainer.checkpoint_callback.best_model_score)
                metrics["best_ckpt"] = trainer.checkpoint_callback.best_model_path
            # Test the final weights (= last.ckpt), so `eval` of last.ckpt reproduces these numbers; not those of
            # a run that a caller's callback ended (an Optuna trial its search's pruner stopped: status pruned).
            ended_by = callback_records(trainer)
            results = [] if ended_by else trainer.test(module, datamodule=run.datamodule, verbose=False)
            metrics.update({k: float(v) for k, v in (results[0] if results else {}).items()})
            phases.end("test")
            log.info(phases.line())
            epochs = trained_epochs(trainer)  # callbacks=[swa]'s batch-norm pass is no epoch of training
            metrics.update(epochs=epochs, epochs_this_run=epochs - start_epoch,
                           global_step=trainer.global_step, status="finished", timings=phases.record())
            metrics.update(ended_by)
            if run.config.get("curves") and trainer.is_global_zero:  # after training: never on its steps
                loggers_off = "trainer.fast_dev_run turns the loggers off" if trainer.fast_dev_run else None
                metrics.update(write_learning_curves(run_dir, f"{label}  {run_dir}", loggers_off, run.task.main))
            if not run.task.is_classify and trainer.is_global_zero and not ended_by:  # in place of a confusion matrix
                metrics.update(write_sample_grid(model, run.datamodule.test_set, run.task, run_dir,
                                                 f"{label}  task {run.task.name}",
                                                 tuple(getattr(run.datamodule, "class_names", ()))))
        except BaseException as exc:
            reason = stop_reason(exc, trainer, received, run.config["model"])
            if reason is exc:  # a run directory turned read-only or full: one line, not Lightning's OSError
                reason = write_fault(exc, run_dir, f"the run stopped at step {trainer.global_step}; the files "
                                                   "written before are kept") or exc
            metrics.update(failure_record(reason, run_dir), train_time_s=round(time.perf_counter() - started, 2),
                           global_step=trainer.global_step)
            if reason is exc:
                raise
            raise reason from None
        finally:
            unrecorded = write_metrics(run_dir / "metrics.json", metrics, failing=metrics["status"] not in (
                "finished", "pruned")) if trainer.is_global_zero else None
    if trainer.is_global_zero:
        print(format_metrics(metrics, run_dir))
    if unrecorded is not None:
        raise unrecorded
    value = metrics.get(monitor)
    if value is None:
        raise ConfigError("monitor", f"the run logged no metric {monitor!r}",
                          allowed=sorted(k for k, v in metrics.items() if isinstance(v, float)))
    return float(value)


def callback_records(trainer: pl.Trainer) -> dict[str, Any]:
    """What the callbacks that ended the run say of it (``run_record()`` with a ``status``); {} when none did."""
    records = (c.run_record() for c in trainer.callbacks if callable(getattr(c, "run_record", None)))
    return {k: v for record in records if record.get("status") for k, v in record.items()}


def _record(run_dir: Path, context: RunContext) -> dict[str, Any]:
    """Where a run's files are and what produced it: the CLI overrides, or (from Python) its config."""
    return {"run_dir": str(run_dir), "config": str(run_dir / "config.yaml"), "launched_from": context.launched_from,
            "overrides": list(context.overrides) if context.overrides is not None else None}


@dataclass(frozen=True)
class EvalPlan:
    """An ``eval`` config checked whole, and what it tests: the checkpoint's model with its weights, on data it fits."""

    plain: dict[str, Any]  # the eval config, plain
    plugins: list[Any]
    ckpt_path: Path  # the checkpoint file (a run directory given: its last.ckpt)
    chosen: str | None  # how it was chosen from a run directory, else None
    stored: dict[str, Any]  # the run config the checkpoint stores
    datamodule: Any
    module: ClassifierModule  # the checkpoint's weights loaded
    averaging: str | None  # "EMA" when the checkpoint's state_dict holds averaged weights
    context: RunContext = RunContext()  # how the command was started (the CLI's overrides, ...)


def check_eval(cfg: Mapping[str, Any] | DictConfig, context: RunContext = RunContext()) -> EvalPlan:
    """Everything ``eval`` checks before it makes its run directory: the options, the checkpoint (read with
    ``weights_only=True``, its model rebuilt, its weights loaded), the data (files there, images of the model's shape,
    no more classes than it predicts), the hooks' layers. A refusal leaves nothing behind. ``context``: from the
    CLI, which data and trainer keys its command line named (only those override the run's)."""
    quiet_third_party(launch.global_rank())
    plain = load_config(cfg)
    if not plain.get("ckpt_path"):
        raise ConfigError("ckpt_path", "missing: which checkpoint to evaluate",
                          hint="python -m modelforge eval ckpt_path=RUN (a run directory, or RUN/checkpoints/NAME.ckpt)")
    plugins = build_hook_plugins(plain.get("hooks"), path="hooks")  # e.g. hooks=[ablate] for an ablation study
    check_trainer_options(plain.get("trainer") or {})
    ckpt_path, which = resolve_checkpoint(plain["ckpt_path"])  # a run directory: its last.ckpt
    ckpt = load_checkpoint(ckpt_path)
    stored = ckpt["hyper_parameters"]["config"]
    data_config = eval_data_config(plain.get("data") or {}, stored.get("data") or {}, context)
    datamodule = build_datamodule(data_config)
    if hasattr(datamodule, "tests_only"):  # an IDX data set: its val_size splits images eval does not read
        datamodule.tests_only = True
    datamodule.prepare_data()
    model = build_model(stored["model"])
    task = build_task(stored.get("task"))
    task.check_plugins(plugins)
    if task.is_classify:
        model_classes = int(ckpt["hyper_parameters"].get("n_classes") or getattr(datamodule, "n_classes", 10))
        check_data_fits(datamodule, model, model_classes, data_config, stored.get("data") or {})
    else:  # the task's own checks: its kind of targets, and the model's output at this data's shapes
        model_classes = ckpt["hyper_parameters"].get("n_classes")
        task.check_data(datamodule)
        task.check_model(model, datamodule)
    # The loss as the run computed it (label smoothing included), so test/loss matches metrics.json.
    module = ClassifierModule(model, config=stored, n_classes=model_classes,
                              label_smoothing=float(stored.get("label_smoothing") or 0.0))
    check_fits(ckpt, module)
    module.load_state_dict(ckpt["state_dict"])
    for plugin in plugins:  # a layer pattern that matches nothing fails now, before testing
        plugin.targets(model)
    averaging = model_weights(ckpt)[1]  # callbacks=[ema]: the checkpoint's state_dict holds the average
    chosen = which if Path(plain["ckpt_path"]).expanduser().is_dir() else None
    return EvalPlan(plain, plugins, ckpt_path, chosen, stored, datamodule, module, averaging, context)


def evaluate(cfg: EvalPlan | Mapping[str, Any] | DictConfig, run_dir: str | Path | None = None,
             context: RunContext | None = None) -> dict[str, float]:
    """Rebuild the model stored in ``cfg.ckpt_path`` (a checkpoint, or a run directory: its last.ckpt, else its best
    one) and report its test metrics, on the data it was trained on unless ``cfg`` chooses other data. ``cfg``: an
    eval config, or the plan :func:`~modelforge.train.run.check_eval` made of one (the CLI checks it before Hydra makes the directory).
    ``context``: as :func:`~modelforge.train.run.check_eval`'s (a plan's own by default)."""
    plan = cfg if isinstance(cfg, EvalPlan) else check_eval(cfg, context or RunContext())
    context = context or plan.context
    plain, plugins, ckpt_path, stored, datamodule, module = (plan.plain, plan.plugins, plan.ckpt_path, plan.stored,
                                                             plan.datamodule, plan.module)
    model, averaging = module.model, plan.averaging
    if plan.chosen:
        log.info("evaluating %s (%s)", ckpt_path, plan.chosen)
    if averaging:
        log.info("evaluating the %s weights of %s (the run averaged its weights; the trained ones are its "
                 "current_model_state)", averaging, ckpt_path)
    run_dir = Path(run_dir) if run_dir is not None else current_run_dir("eval")  # as the CLI: outputs/eval/...
    if not context.claimed:  # its eval_metrics.json must replace no earlier record (the CLI claims before Hydra writes)
        claim_run_dir(run_dir, "eval", dir_key=context.dir_key)
    for plugin in plugins:  # what a plugin checks as it attaches (feature_capture: where its images go)
        plugin.attach(model, run_dir=run_dir).remove()
    trainer_options = eval_trainer_options(plain.get("trainer") or {}, stored.get("trainer") or {}, context)
    trainer = build_trainer({**stored, "trainer": trainer_options, "hooks": None, "logger": None},
                            run_dir, plugins=plugins, for_eval=True)
    # A classifier's confusion matrix, from the test's own forward passes; another task draws sample outputs.
    confusion = ConfusionCounts(module.hparams.n_classes) if module.task.is_classify else None
    if confusion is not None:
        trainer.callbacks.append(confusion)
    with ddp_run_scope(trainer):
        results = trainer.test(module, datamodule=datamodule, verbose=False)
    metrics = {k: float(v) for k, v in (results[0] if results else {}).items()}
    if trainer.is_global_zero:
        main = f"test/{module.task.main}"
        title = f"{model_label(stored['model'])}  {main} {metrics.get(main, 0):.4f}"
        names = tuple(getattr(datamodule, "class_names", ()))
        drawn = (write_confusion_matrix(confusion.counts, run_dir.absolute(), names, title) if confusion is not None
                 else write_sample_grid(module.model, datamodule.test_set, module.task, run_dir.absolute(), title,
                                        names))
        print(format_metrics({**metrics, "ckpt_path": str(ckpt_path)}, run_dir))
        try:
            write_json(run_dir / "eval_metrics.json", {**metrics, "ckpt_path": str(ckpt_path),
                                                       "weights": averaging or "trained",
                                                       "hooks": plain.get("hooks") or {}, **drawn})
        except OSError as exc:  # the run directory turned read-only or full while testing: one line, exit 1
            if (fault := write_fault(exc, run_dir, "the figures printed above were measured but are not "
                                                   "recorded")) is None:
                raise
            raise fault from None
    return metrics

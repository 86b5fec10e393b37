"""What a run trains its model to do: a task (``task=classify|segment|reconstruct|multilabel|regress``).

A task is a small object read from ``conf/task/<name>.yaml``: the output it needs from the model (checked when the
model is built, against the data's shapes), the loss (any ``torch.nn`` loss by name), the metrics (torchmetrics
classes by name) and which of them is the run's main metric. One LightningModule serves every task
(:mod:`modelforge.train.module`); ``Task()`` is ``classify``, the default, as ``conf/task/classify.yaml`` writes it.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Mapping, Sequence
from typing import Any

from torch import Tensor, nn

from modelforge.config import check_call
from modelforge.errors import ConfigError, UnknownNameError
from modelforge.models.heads import check_classifier_output, check_output_shape

# What a model gives per sample, by kind of output, and what the data's batches hold as targets for it:
# a data module says which it serves in ``target`` (none said: ``classes``, a class index per image).
OUTPUTS = {  # kind: (what the model gives per sample, what the data's targets are)
    "classes": ("[n_classes] class scores", "one class index per image"),
    "class_map": ("[n_classes, H, W] class scores per pixel at the input's size", "a class index per pixel"),
    "image": ("the input's [C, H, W]", "an image"),
    "labels": ("[n_labels] scores, one per label", "0/1 per label"),
    "numbers": ("[n_targets] numbers", "numbers"),
}
# The shipped data sets of each kind of target, for the hint of a refusal.
_DATA_OF = {"classes": "mnist", "class_map": "mnist_segment or segment_folder", "image": "mnist_denoise",
            "labels": "mnist_multilabel or image_table", "numbers": "mnist_sum or image_table"}
# The shipped models that give each kind of output, for the hint of a model refused for a task.
_MODELS_OF = {"class_map": "model=unet, or a zoo backbone with heads.class_map: resnet18, resnet34, resnet50, "
                           "convnext_tiny, mobilenet_v3_small, efficientnet_b0",
              "image": "model=autoencoder"}
# Where metrics are looked up by name: torchmetrics' own namespaces, never an arbitrary import path.
_METRIC_HOMES = ("torchmetrics.classification", "torchmetrics.regression", "torchmetrics.image",
                 "torchmetrics.segmentation", "torchmetrics")
# Metrics whose smaller values are better (what early stopping and best checkpoints need to know).
LOWER_IS_BETTER = ("loss", "mae", "mse", "rmse", "l1")


@dataclasses.dataclass(frozen=True)
class Task:
    """A checked ``task`` config. The defaults are ``classify``'s (``conf/task/classify.yaml``)."""

    name: str = "classify"
    output: str = "classes"  # a key of OUTPUTS
    loss: Mapping[str, Any] = dataclasses.field(default_factory=lambda: {"name": "CrossEntropyLoss"})
    metrics: Mapping[str, Mapping[str, Any]] = dataclasses.field(
        default_factory=lambda: {"acc": {"name": "MulticlassAccuracy", "average": "micro"}})
    main: str = "acc"  # the metric that monitor (val/<main>), sweeps, early stopping and best checkpoints follow
    threshold: float = 0.5  # multilabel: predict names the labels whose probability is above it

    @property
    def is_classify(self) -> bool:
        return self.output == "classes"

    def build_loss(self, label_smoothing: float = 0.0) -> nn.Module:
        """``torch.nn.<loss.name>(**args)``; the run's ``label_smoothing`` goes to a loss that takes it."""
        options = dict(self.loss)
        cls = _loss_class(options.pop("name", None))
        if label_smoothing and "label_smoothing" in inspect.signature(cls).parameters:
            options.setdefault("label_smoothing", label_smoothing)
        return cls(**options)

    def build_metrics(self, n_classes: int | None) -> dict[str, nn.Module]:
        """Each metric by its key, its ``num_classes``/``num_labels`` (and ``ignore_index``) filled from the data."""
        built = {}
        for key, spec in self.metrics.items():
            options = dict(spec)
            cls = _metric_class(options.pop("name", None), f"task.metrics.{key}.name")
            params = inspect.signature(cls).parameters
            for count in ("num_classes", "num_labels", "num_outputs"):
                if count in params and count not in options and n_classes is not None:
                    options[count] = n_classes
            if "ignore_index" in params and "ignore_index" not in options and "ignore_index" in self.loss:
                options["ignore_index"] = self.loss["ignore_index"]
            if "validate_args" in params:  # labels and masks are checked when the data is read
                options.setdefault("validate_args", False)
            built[key] = cls(**options)
        return built

    def predictions(self, output: Tensor) -> Tensor:
        """What the metrics are updated with: class indices for class scores, probabilities for labels."""
        if self.output in ("classes", "class_map"):
            return output.argmax(1)
        return output.sigmoid() if self.output == "labels" else output

    def expected_output(self, input_shape: tuple[int, ...] | list[int], n_classes: int | None) -> list[int]:
        """The model's output per sample that this task needs, for data of ``input_shape`` and ``n_classes``."""
        if self.output == "image":
            return [int(d) for d in input_shape]
        if self.output == "class_map":
            return [int(n_classes or 0), *(int(d) for d in input_shape[1:])]
        return [int(n_classes or 0)]

    def choose_head(self, model_cfg: Mapping[str, Any]) -> dict[str, Any]:
        """``model_cfg`` with the head for this task's output, when the model carries one and none is chosen: a zoo
        backbone's ``heads.class_map`` (an FPN on its stages) for ``segment``. Other models give their own output."""
        heads = model_cfg.get("heads") or {}
        if self.output in heads and model_cfg.get("head") is None:
            return {**model_cfg, "head": self.output}
        return dict(model_cfg)

    def check_model(self, model: nn.Module, datamodule: Any, path: str = "model", label: str | None = None) -> None:
        """Refuse a model whose output does not fit this task on this data, naming the node and both shapes;
        ``label``: the model's name, for the refusal of a model that has no head for this task."""
        n_classes = getattr(datamodule, "n_classes", None)
        if self.is_classify:
            check_classifier_output(model, n_classes or 10, path)
            return
        expected = self.expected_output(datamodule.input_shape, n_classes)
        try:
            check_output_shape(model, expected, f"task {self.name!r} ({OUTPUTS[self.output][0]})", path)
        except ConfigError as exc:
            shape = getattr(model, "output_shape", None)
            if label is None or shape is None or len(shape) == len(expected):  # another kind of output: no head
                raise
            raise ConfigError(exc.path, f"{exc.problem}: model {label!r} has no head for it (no "
                              f"heads.{self.output} in its file)", hint=_MODELS_OF.get(self.output)) from None

    def check_plugins(self, plugins: Sequence[Any]) -> None:
        """Refuse a hook plugin that explains a classifier's class scores (grad_cam) for another task."""
        for plugin in plugins:
            if getattr(plugin, "needs_class_scores", False) and not self.is_classify:
                raise ConfigError(plugin.path, f"{plugin.name} explains the score of a predicted class, a "
                                  f"classifier's; task {self.name!r} gives {OUTPUTS[self.output][0]}",
                                  hint=f"leave {plugin.name} out of hooks for this task")

    def check_data(self, datamodule: Any) -> None:
        """Refuse data whose targets this task cannot learn (class labels for a segmentation, ...)."""
        target = getattr(datamodule, "target", "classes")
        if target != self.output and not (self.output == "numbers" and target == "labels"):  # 0/1 are numbers too
            name = getattr(datamodule, "name", type(datamodule).__name__)
            raise ConfigError("data", f"task {self.name!r} learns {OUTPUTS[self.output][1]}, but data {name!r} gives "
                              f"{OUTPUTS[target][1]}", hint=f"data={_DATA_OF[self.output]}, or the task of this data")


def build_task(cfg: Mapping[str, Any] | None, path: str = "task", *, metrics: bool = True) -> Task:
    """The checked Task of a ``task`` config (None: classify): every name resolves, ``main`` is one of ``metrics``.
    ``metrics=False`` leaves the metrics' classes unchecked: they are torchmetrics', of the ``[train]`` extra, and
    ``summary`` runs without it."""
    options = dict(cfg or {})
    fields = {f.name for f in dataclasses.fields(Task)}
    for key in options:
        if key not in fields:
            raise UnknownNameError("task option", key, fields, path=f"{path}.{key}")
    options = {k: v for k, v in options.items() if v is not None}
    task = Task(**options)
    if task.output not in OUTPUTS:
        raise UnknownNameError("task output", task.output, OUTPUTS, path=f"{path}.output")
    loss = dict(task.loss)
    check_call(_loss_class(loss.pop("name", None)), loss, f"{path}.loss", f"loss {task.loss.get('name')!r}")
    for key, spec in task.metrics.items() if metrics else ():
        metric = dict(spec)
        cls = _metric_class(metric.pop("name", None), f"{path}.metrics.{key}.name")
        check_call(cls, metric, f"{path}.metrics.{key}", f"metric {spec['name']!r}",
                   filled=("num_classes", "num_labels", "num_outputs"))
    if task.main not in task.metrics:
        raise UnknownNameError("metric", task.main, task.metrics, path=f"{path}.main")
    if not 0.0 < float(task.threshold) < 1.0:
        raise ConfigError(f"{path}.threshold", f"must be in (0, 1), got {task.threshold}")
    return task


def metric_mode(monitor: str) -> str:
    """``min`` for a metric whose smaller values are better (a loss, an error), else ``max``."""
    return "min" if monitor.rsplit("/", 1)[-1].endswith(LOWER_IS_BETTER) else "max"


def task_monitors(task: Task) -> tuple[str, ...]:
    """What a run of ``task`` logs at each validation: what ``monitor`` may name."""
    return (*(f"val/{key}" for key in task.metrics), "val/loss")


def _loss_class(name: Any) -> type[nn.Module]:
    losses = sorted(n for n in dir(nn) if n.endswith("Loss") and isinstance(getattr(nn, n), type))
    if name not in losses:
        raise UnknownNameError("loss", name, losses, path="task.loss.name")
    return getattr(nn, name)


def _metric_class(name: Any, path: str) -> type:
    import importlib

    from torchmetrics import Metric

    for home in _METRIC_HOMES:
        found = getattr(importlib.import_module(home), str(name), None)
        if isinstance(found, type) and issubclass(found, Metric) and "task" not in inspect.signature(found).parameters:
            return found
    names = {n for home in _METRIC_HOMES for n, v in vars(importlib.import_module(home)).items()
             if isinstance(v, type) and issubclass(v, Metric)}
    raise UnknownNameError("metric", name, names, path=path)


"""The built-in ``data=``, ``callbacks=[...]`` and ``logger=[...]`` names: Lightning classes, imported on first use.

An allow-list: each name maps to one class of ``pytorch_lightning`` (or modelforge's IDX data
module); a user's own data module, callback or logger class joins it through
``DATAMODULES.register`` / ``CALLBACKS.register`` / ``LOGGERS.register`` in their package.
Nothing here imports Lightning or ``modelforge.data``: ``import modelforge`` stays light.
"""

from __future__ import annotations

from modelforge.lazy import LazyClass
from modelforge.registry import CALLBACKS, DATAMODULES, LOGGERS

_DATA = "modelforge.data.datamodule"
_CB = "pytorch_lightning.callbacks"

for _name, _what in (
    ("mnist", "MNIST digits (IDX files, checked, downloaded)"),
    ("fashion_mnist", "Fashion-MNIST clothing (IDX files, checked, downloaded)"),
):
    DATAMODULES.add(_name, LazyClass(_DATA, "IdxDataModule", _what, dataset=_name))
DATAMODULES.add("idx", LazyClass(_DATA, "IdxDataModule",
                                 "any folder of the four IDX files: data.data_dir, n_classes; stats computed",
                                 dataset=None))

_LOG = "pytorch_lightning.loggers"

for _name, _cls, _what in (
    ("early_stopping", "EarlyStopping", "stop when the monitored metric stops improving (patience, min_delta)"),
    ("lr_monitor", "LearningRateMonitor", "log the learning rate of every optimizer group"),
    ("rich_progress_bar", "RichProgressBar", "progress bar drawn with rich"),
    ("model_summary", "ModelSummary", "layer table at the start of fit, max_depth levels deep"),
    ("rich_model_summary", "RichModelSummary", "ModelSummary drawn with rich"),
    ("swa", "StochasticWeightAveraging", "stochastic weight averaging from swa_epoch_start (swa_lrs)"),
    ("timer", "Timer", "stop training after a duration (DD:HH:MM:SS or {hours: 1})"),
    ("device_stats", "DeviceStatsMonitor", "log device (CPU/GPU) statistics"),
    ("throughput", "ThroughputMonitor", "log samples per second and FLOPs utilisation"),
):
    CALLBACKS.add(_name, LazyClass(_CB, _cls, f"{_what} (pytorch_lightning.callbacks.{_cls})"))

for _name, _cls, _requires, _what in (
    ("csv", "CSVLogger", (), "RUN/logs/metrics.csv"),
    ("tensorboard", "TensorBoardLogger", ("tensorboard", "tensorboardX"), "RUN/logs/ event files"),
    ("mlflow", "MLFlowLogger", ("mlflow",), "MLflow tracking (default store: file:RUN/mlruns)"),
    ("wandb", "WandbLogger", ("wandb",), "Weights & Biases"),
    ("comet", "CometLogger", ("comet_ml",), "Comet"),
    ("neptune", "NeptuneLogger", ("neptune",), "Neptune"),
):
    LOGGERS.add(_name, LazyClass(_LOG, _cls, f"{_what} (pytorch_lightning.loggers.{_cls})", requires=_requires))

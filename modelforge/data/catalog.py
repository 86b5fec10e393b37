"""The built-in ``data=<name>`` options, registered in DATAMODULES without importing Lightning."""

from __future__ import annotations

from modelforge.lazy import LazyClass
from modelforge.registry import DATAMODULES

_MODULE = "modelforge.data.datamodule"

DATAMODULES.add("mnist", LazyClass(_MODULE, "IdxDataModule", "MNIST digits (IDX files, checked, downloaded)",
                                   dataset="mnist"))
DATAMODULES.add("fashion_mnist", LazyClass(_MODULE, "IdxDataModule",
                                           "Fashion-MNIST clothing (IDX files, checked, downloaded)",
                                           dataset="fashion_mnist"))
DATAMODULES.add("idx", LazyClass(_MODULE, "IdxDataModule",
                                 "any folder of the four IDX files: data.data_dir, n_classes; stats computed",
                                 dataset=None))

"""TEMPORARY: the built-in data modules, until modelforge.data registers them itself."""

from __future__ import annotations

from modelforge.lazy import LazyClass
from modelforge.registry import DATAMODULES

_DATA = "modelforge.data.datamodule"
for _name, _what in (
    ("mnist", "MNIST digits (IDX files, checked, downloaded)"),
    ("fashion_mnist", "Fashion-MNIST clothing (IDX files, checked, downloaded)"),
):
    DATAMODULES.add(_name, LazyClass(_DATA, "IdxDataModule", _what, dataset=_name))
DATAMODULES.add("idx", LazyClass(_DATA, "IdxDataModule",
                                 "any folder of the four IDX files: data.data_dir, n_classes; stats computed",
                                 dataset=None))

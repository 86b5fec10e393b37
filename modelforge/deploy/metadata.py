"""What a deployed model carries: its config, input shape, normalization, class names and versions.

``model_metadata(run_config)`` makes the dict; exports store it as JSON under ``METADATA_KEY`` (``.pt2``,
TorchScript: an extra file; ONNX: ``metadata_props["modelforge"]``) and ``read_metadata`` reads it back.
No Lightning here: ``load_model``, ``export`` and ``predict`` use it.
"""

from __future__ import annotations

import io
import json
import sys
import zipfile
import zlib
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from modelforge.deploy.damage import (
    PT2,
    TORCHSCRIPT,
    ZIP_MAGIC,
    onnx_damage,
    wrong_kind,
    zip_damage,
    zip_kind,
)
from modelforge.errors import CheckpointError, DataError

if TYPE_CHECKING:
    from modelforge.data.idx import IdxDataset

METADATA_KEY = "modelforge.json"  # the extra file's name in .pt2 and TorchScript archives
ONNX_METADATA_KEY = "modelforge"  # the metadata_props key in an .onnx file
SIDECAR_SUFFIX = ".modelforge.json"  # beside a file whose format holds no metadata


def model_metadata(run_config: Mapping[str, Any], *, input_shape: list[int] | tuple[int, ...] | None = None,
                   normalization: tuple[float, float] | None = None) -> dict[str, Any]:
    """The JSON-serialisable metadata of the model a run trained (``run_config``: a checkpoint's stored config).

    Keys: ``model`` (model config), ``input_shape`` [C, H, W], ``normalize`` ({"mean": [..], "std": [..]},
    or None when the run fed raw [0, 1] pixels), ``class_names``, ``data`` (the data set's name),
    ``modelforge_version``, ``torch_version``. ``input_shape``: the built model's (``model.input_shape``),
    else read from the model config. ``normalization``: (mean, std) when known better than the config
    (a ``data=idx`` run with ``mean: null`` had them computed from its training images).
    """
    from modelforge.data.idx import (
        KNOWN_DATASETS,  # here: `import modelforge` loads no data code
    )

    from modelforge.data.options import DERIVED_CLASS_NAMES, DERIVED_SETS

    model_cfg = _plain(run_config.get("model") or {})
    data_cfg = dict(run_config.get("data") or {})
    name = str(data_cfg.get("name") or "mnist")
    dataset = KNOWN_DATASETS.get(name) or (KNOWN_DATASETS["mnist"] if name in DERIVED_SETS else None)
    if name == "mnist_denoise":  # its inputs are pixels in [0, 1], as its targets
        data_cfg["normalize"] = False
    shape = [int(d) for d in input_shape] if input_shape is not None else _config_input_shape(model_cfg, dataset)
    folder = _image_folder(data_cfg) if name == "image_folder" else None
    return {
        "model": model_cfg,
        "input_shape": shape,
        "normalize": folder["normalize"] if folder else _normalize(data_cfg, dataset, normalization),
        "class_names": folder["class_names"] if folder else list(DERIVED_CLASS_NAMES.get(name, ())) or
        _class_names(model_cfg, dataset),
        "task": _plain(run_config.get("task")),  # null: classify (modelforge.tasks)
        **({"preprocess": folder["preprocess"]} if folder else {}),  # the run's resize and crop, in color
        "data": name,
        "modelforge_version": str(getattr(sys.modules["modelforge"], "__version__", "unknown")),
        "torch_version": torch.__version__,
    }


def _image_folder(data_cfg: Mapping[str, Any]) -> dict[str, Any]:
    """A ``data=image_folder`` run's class names (its recorded ``data.classes``), normalization and transform."""
    from modelforge.data.image_transforms import image_folder_metadata

    return image_folder_metadata(data_cfg)


def _plain(value: Any) -> Any:
    """Plain JSON types: tuples become lists, so that the dict round-trips through JSON unchanged."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _config_input_shape(model_cfg: Mapping[str, Any], dataset: IdxDataset | None) -> list[int]:
    size = model_cfg.get("input_size") or (dataset.image_size if dataset is not None else (28, 28))
    size = [int(size), int(size)] if isinstance(size, int) else [int(d) for d in size]
    return [int(model_cfg.get("in_channels") or 1), *size]


def _normalize(data_cfg: Mapping[str, Any], dataset: IdxDataset | None,
               normalization: tuple[float, float] | None) -> dict[str, list[float]] | None:
    if data_cfg.get("normalize", True) is False:
        return None
    if normalization is not None:
        mean, std = normalization
    else:
        mean = data_cfg.get("mean") if data_cfg.get("mean") is not None else getattr(dataset, "mean", None)
        std = data_cfg.get("std") if data_cfg.get("std") is not None else getattr(dataset, "std", None)
        if mean is None or std is None:  # data=idx without given stats: the run computed them from its images
            mean, std = _computed_normalization(data_cfg)
    return {"mean": [float(mean)], "std": [float(std)]}


def _computed_normalization(data_cfg: Mapping[str, Any]) -> tuple[float, float]:
    """(mean, std) of the training images, as ``IdxDataModule.normalization`` computes them."""
    from modelforge.data.download import find_file, resolve_data_dir
    from modelforge.data.idx import SPLITS, read_checked

    root = resolve_data_dir(data_cfg.get("data_dir"), str(data_cfg.get("name") or "idx"))
    images_name = SPLITS["train"][0]
    if (path := find_file(root, images_name)) is None:
        raise DataError(f"data.data_dir: the run's normalization was computed from {root / images_name}, "
                        "which is gone; pass normalization=(mean, std)")
    pixels = read_checked(path, images_name, None, verify=False).float().div_(255.0)
    return float(pixels.mean()), float(pixels.std())


def _class_names(model_cfg: Mapping[str, Any], dataset: IdxDataset | None) -> list[str]:
    n_classes = model_cfg.get("n_classes")
    if dataset is not None and (n_classes is None or int(n_classes) == len(dataset.classes)):
        return list(dataset.classes)
    return [str(k) for k in range(int(n_classes if n_classes is not None else 10))]


def metadata_json(metadata: Mapping[str, Any]) -> str:
    return json.dumps(metadata, indent=2, sort_keys=True)


def sidecar_path(path: str | Path) -> Path:
    """Where the metadata of a file that cannot hold it lives: ``model.xyz.modelforge.json``."""
    path = Path(path)
    return path.with_name(path.name + SIDECAR_SUFFIX)


def read_metadata(path: str | Path) -> dict[str, Any]:
    """The metadata an exported model carries: inside a ``.pt2``, ``.onnx``, TorchScript ``.pt``/``.ts``
    file, else in the sidecar JSON beside it. A CheckpointError names the file when there is none."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise CheckpointError(f"no exported model at {path}")
    return metadata_in(path, path.read_bytes())


def metadata_in(path: Path, data: bytes) -> dict[str, Any]:
    """:func:`read_metadata` of the file ``path`` whose bytes the caller read (``data``): what it checks is
    what it loads. A file of another kind than its suffix names (a ``torch.save`` checkpoint named ``.pt2``)
    is a CheckpointError saying so."""
    found = _read_onnx(path, data) if path.suffix == ".onnx" else _read_archive(path, data)
    if found is None and (sidecar := sidecar_path(path)).is_file():
        found = sidecar.read_text()
    if found is None:
        raise CheckpointError(f"{path} carries no modelforge metadata (no {METADATA_KEY} inside it and no "
                              f"{sidecar_path(path).name} beside it): export it with `python -m modelforge export`")
    try:
        return json.loads(found)
    except (ValueError, RecursionError) as exc:
        raise CheckpointError(f"{path}: its modelforge metadata is not valid JSON ({str(exc)[:120]})") from None


def _read_archive(path: Path, data: bytes) -> str | None:
    """``.pt2`` and TorchScript files are zip archives that keep extra files at ``<root>/extra/<name>``:
    read without loading the program. A file that is no whole zip archive of that kind is a CheckpointError
    saying so."""
    kind = PT2 if path.suffix == ".pt2" else TORCHSCRIPT
    if damage := zip_damage(path, kind, data):
        raise CheckpointError(f"{path} {damage}")
    if not data.startswith(ZIP_MAGIC):  # a pickle: torch.save's legacy format
        raise CheckpointError(f"{path} is a Python pickle (torch.save's legacy format), not a {kind}")
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            names = archive.namelist()
            if (found := zip_kind(names)) != kind:
                raise CheckpointError(f"{path} {wrong_kind(found, kind, path.suffix)}")
            extra = [n for n in names if n.endswith(f"extra/{METADATA_KEY}")]
            return archive.read(extra[0]).decode("utf-8") if extra else None
    except (zipfile.BadZipFile, zlib.error, EOFError, UnicodeDecodeError, ValueError) as exc:
        raise CheckpointError(f"{path} is damaged: its zip archive does not read back ({exc})") from None


def onnx_model(path: Path, data: bytes) -> Any:
    """The ONNX ModelProto in ``data`` (the bytes of ``path``), weights kept where they are; a file onnx
    cannot parse is a CheckpointError saying why."""
    try:
        import onnx
    except ImportError as exc:
        raise CheckpointError("reading an .onnx file needs the onnx package: "
                              "pip install 'modelforge[export]'") from exc
    try:
        return onnx.load_model_from_string(data)
    except Exception:  # noqa: BLE001 - protobuf's DecodeError, and onnx's own errors for other files
        raise CheckpointError(f"{path} {onnx_damage(path, data)}") from None


def _read_onnx(path: Path, data: bytes) -> str | None:
    model = onnx_model(path, data)
    return next((p.value for p in model.metadata_props if p.key == ONNX_METADATA_KEY), None)

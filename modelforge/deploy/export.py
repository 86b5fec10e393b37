"""``export(model_or_path, format)``: a trained model as a ``.pt2`` program (torch.export), an ONNX file
(dynamo exporter) or TorchScript (trace), with its metadata inside, loaded back and checked against the
eager model on the run's test images. ``python -m modelforge export`` runs :func:`export_task`.
"""

from __future__ import annotations

import contextlib
import copy
import inspect
import logging
import math
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from modelforge.config import load_config
from modelforge.config_types import check_type, fits
from modelforge.deploy.exporters import BUILDERS, WRITERS, _first_line
from modelforge.deploy.load import existing_file, load_model, resolve_checkpoint
from modelforge.deploy.metadata import (
    metadata_json,
    model_metadata,
    read_metadata,
)
from modelforge.deploy.paths import check_output_place, names_a_folder
from modelforge.deploy.runtime import open_model
from modelforge.deploy.signals import Doing, stop_behind, stopped_by_signals
from modelforge.errors import ConfigError, DataError, ExportError, UnknownNameError
from modelforge.files.atomic import remove_dead_temps, write_json
from modelforge.files.claim import claimed
from modelforge.tasks import build_task

log = logging.getLogger(__name__)

FORMATS = {"pt2": ".pt2", "onnx": ".onnx", "torchscript": ".pt"}  # format -> the suffix of its file
SUFFIXES = {"pt2": (".pt2",), "onnx": (".onnx",), "torchscript": (".pt", ".ts")}
METHODS = ("trace", "script")  # how TorchScript is made
ONNX_PACKAGES = ("onnx", "onnxscript", "onnxruntime")
EXTRA = "pip install 'modelforge[export]'"
CHECK_BATCH_VALUES = 2**22  # the check's batches hold at most this many input values (16 MB); MNIST's 300 is one


def export(model_or_path: nn.Module | str | Path, format: str = "pt2", output: str | Path | None = None, *,
           atol: float = 1e-4, rtol: float = 1e-5, check: bool = True, n_images: int = 300, data_dir: str | Path | None = None,
           dynamic_batch: bool = True, batch_size: int = 1, method: str = "trace", opset: int | None = None,
           ema: bool = True, overwrite: bool = False) -> Path:
    """Write ``model_or_path`` (a module, a ``.ckpt`` or a run directory) as a ``format`` file; return its path.

    Args:
        output: the file, or a folder for it; None: beside the checkpoint (``last.ckpt`` -> ``last.onnx``).
        atol, rtol, check, n_images, data_dir: unless ``check`` is false, the file is loaded back and run on
            ``n_images`` test images of the run's data (from ``data_dir``, else the run's folder: an IDX folder,
            or a ``data=image_folder`` run's image folder); a logit further than ``atol + rtol * |logit|`` from
            the eager model's (``torch.allclose``'s test: float rounding grows with the logits), or any other
            top-1 class, raises ExportError.
        dynamic_batch: any batch size; false: batches of ``batch_size`` only.
        method: TorchScript's ``trace`` or ``script``. ``opset``: ONNX's (None: torch's default).
        ema: a run that averaged its weights (``callbacks=[ema]``) exports the average; false: the trained ones.
        overwrite: replace a file already at the output path (else refused before any work, as run directories are).

    SIGTERM or Ctrl-C stop it with :class:`~modelforge.errors.Terminated` / ``Interrupted`` saying what they
    interrupted: a file being written is then not written and leaves no temp file; one already renamed into
    place is said to be (a ``.check.json`` beside it is always of it). The output file is held for the whole
    export (:func:`~modelforge.files.claim.claimed`): a second export into it is refused with
    :class:`~modelforge.files.claim.FileBusyError`, naming the first one's process.
    """
    format, method = _checked_choice("format", format, FORMATS), _checked_choice("method", method, METHODS)
    _check_numbers(atol=atol, rtol=rtol, n_images=n_images, batch_size=batch_size, **({"opset": opset} if opset else {}))
    for key, value in {"check": check, "dynamic_batch": dynamic_batch, "ema": ema, "overwrite": overwrite}.items():
        check_type(value, bool, key)  # `overwrite=no` is a string, and true as a condition
    if format == "onnx":
        _need_onnx()
    from_file = isinstance(model_or_path, (str, Path))
    with contextlib.ExitStack() as held:
        if from_file:  # the output is refused, or claimed, before the checkpoint is read
            ckpt = existing_file(resolve_checkpoint(model_or_path)[0])
            path = _claimed_output(held, _output_path(output, format, ckpt.parent, ckpt.stem, overwrite), overwrite)
        now = held.enter_context(stopped_by_signals(f"while loading {model_or_path}; nothing was written"))
        model = _without_hooks(load_model(model_or_path, ema=ema) if from_file else model_or_path)
        meta = _metadata(model)
        if not from_file:
            ckpt = getattr(model, "checkpoint_path", None)
            place = (Path(ckpt).parent, Path(ckpt).stem) if ckpt else (Path.cwd(), _name(model, meta))
            path = _claimed_output(held, _output_path(output, format, *place, overwrite), overwrite)
        _build_and_write(model, meta, path, format, now, dynamic_batch=dynamic_batch, batch_size=batch_size,
                         method=method, opset=opset)
        if check:
            now.what = (f"while checking {path}; the file is written (complete) but not checked: no "
                        f"{check_json_path(path).name} (check=false skips the check)")
            check_export(model, path, format, atol=atol, rtol=rtol, n_images=n_images, data_dir=data_dir,
                         batch_size=None if dynamic_batch else batch_size, now=now)
    return path


def _claimed_output(held: contextlib.ExitStack, path: Path, overwrite: bool) -> Path:
    """``path``, held for this export until it ends (:func:`~modelforge.files.claim.claimed`); an earlier export's
    temp files that a killed process left beside it are removed."""
    held.enter_context(claimed(path, "export"))
    if path.exists() and not overwrite:  # another export finished it after the first look
        _refuse_existing(path)
    if removed := remove_dead_temps(path.parent):
        print(f"note: removed {len(removed)} temp file{'s' if len(removed) > 1 else ''} of a writer that was killed: "
              + ", ".join(p.name for p in removed[:3]), file=sys.stderr)
    return path


def check_json_path(path: Path) -> Path:
    """Where the check of the exported file ``path`` is written: ``<path>.check.json``."""
    return path.with_name(path.name + ".check.json")


def _build_and_write(model: nn.Module, meta: dict[str, Any], path: Path, format: str, now: Doing, *,
                     dynamic_batch: bool, batch_size: int, method: str, opset: int | None) -> None:
    """Export ``model`` in memory, then write it to ``path`` with its metadata; ``now`` says which of the two runs."""
    example = torch.randn(2 if dynamic_batch else batch_size, *meta["input_shape"])
    options = {"dynamic_batch": dynamic_batch, "method": method, "opset": opset}
    _check_one_output(model, meta, example)
    started = time.perf_counter()
    now.what = f"while exporting {_name(model, meta)} to {format}; nothing was written"
    try:
        artifact = BUILDERS[format](model, example, **options)
    except ExportError:
        raise
    except Exception as exc:  # noqa: BLE001 - each exporter fails in its own kinds: one message says where
        if (stop := stop_behind(exc)) is not None:
            raise stop from None  # a signal, not the model: no probing of the other formats
        raise _cannot_export(format, model, example, options, exc) from None
    kept = "; the earlier file there is unchanged" if path.exists() else ""
    now.what = f"while writing {path}; it was not written and no temp file is left{kept}"
    check_path = check_json_path(path)

    def renamed() -> None:  # in one step with the rename, for a stop: a check.json is always of the file beside it
        check_path.unlink(missing_ok=True)  # the check of the file just replaced
        now.what = f"just after writing {path} (complete, not checked: no {check_path.name})"

    WRITERS[format](artifact, path, metadata_json(meta), renamed)
    shape = "any batch size" if dynamic_batch else f"batches of {batch_size}"
    print(f"exported {_name(model, meta)} to {path} ({format}, {path.stat().st_size / 1e6:.2f} MB, {shape}) "
          f"in {time.perf_counter() - started:.1f} s")


def _check_one_output(model: nn.Module, meta: Mapping[str, Any], example: Tensor) -> None:
    """Refuse, before anything is exported, a model that returns no single tensor (a feature-map model's dict of
    maps): its file could be neither checked against the model nor run by predict."""
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            output = model(example)
    except Exception:  # noqa: BLE001 - the exporter's own run says where the model fails
        return
    finally:
        model.train(was_training)
    if not isinstance(output, Tensor):
        kind = f"a dict of {', '.join(map(str, output))}" if isinstance(output, Mapping) else f"a {type(output).__name__}"
        raise ExportError(f"{_name(model, meta)} returns {kind}, not one tensor: export writes a model of one "
                          "output, checked against the model and run by predict; nothing was written (for feature "
                          "maps, torch.export.export the module yourself, or export the model without features)")


def export_task(cfg: Mapping[str, Any]) -> Path:
    """``python -m modelforge export ckpt_path=... format=...``: conf/export.yaml's keys are :func:`export`'s."""
    plain = load_config(cfg)
    if not plain.get("ckpt_path"):
        raise ConfigError("ckpt_path", "missing: the checkpoint or run directory to export",
                          hint="python -m modelforge export ckpt_path=RUN/checkpoints/last.ckpt format=onnx")
    options = {k: plain[k] for k in inspect.signature(export).parameters if k in plain and k != "model_or_path"}
    return export(str(plain["ckpt_path"]), **options)


# --- the check: the exported file against the eager model on real images ---------------------------------

def check_export(model: nn.Module, path: Path, format: str, *, atol: float = 1e-4, rtol: float = 1e-5,
                 n_images: int = 300,
                 data_dir: str | Path | None = None, batch_size: int | None = None,
                 now: Doing | None = None) -> dict[str, Any]:
    """Run ``path`` and ``model`` on the same images; write ``<path>.check.json``; raise ExportError on a mismatch.

    ``batch_size``: the file's fixed batch size; None: it takes any, checked with batches of several images (all
    at once where they are small: :func:`check_batch_size`) and with one.
    ``now``: what a stop reports, noted as the check file is renamed into place.
    """
    meta = _metadata(model)
    if read_metadata(path) != meta:
        raise ExportError(f"{path}: the metadata read back differs from the model's", exit_code=1)
    images, labels, source = check_images(meta, data_dir, n_images, data_config=getattr(model, "data_config", None))
    exported = open_model(path)  # as predict runs it: a fixed batch size is padded to
    chunk = check_batch_size(meta["input_shape"], len(images))
    with torch.no_grad():
        expected = torch.cat([model(part) for part in images.split(chunk)])
    batches = [chunk, 1] if batch_size is None else [batch_size]
    got = {size: exported(images if size != 1 or batch_size else images[:1], chunk=size) for size in batches}
    diffs = {size: float((out - expected[:len(out)]).abs().max()) for size, out in got.items()}
    close = all(torch.allclose(out, expected[:len(out)], rtol=rtol, atol=atol) for out in got.values())
    full = got[batches[0]]
    # An image agrees when its top class does (a segmentation's: every pixel's); an image, labels or numbers out
    # have no top class: their check is the difference alone.
    scores = build_task(meta.get("task")).output in ("classes", "class_map")
    agree = int((full.argmax(1) == expected[:len(full)].argmax(1)).reshape(len(full), -1).all(1).sum()) \
        if scores else len(full)
    report = {"format": format, "file": str(path), "images": source, "n_images": len(images),
              "batch_sizes": batches, "max_abs_diff": max(diffs.values()), "max_abs_diff_by_batch": diffs,
              "top1_agreement": agree / len(full) if scores else None, "atol": atol, "rtol": rtol,
              "metadata": "inside the file", "torch": torch.__version__}
    if labels is not None:
        report.update(eager_top1_acc=float((expected.argmax(1) == labels).float().mean()),
                      exported_top1_acc=float((full.argmax(1) == labels[:len(full)]).float().mean()))
    report["passed"] = close and agree == len(full)
    check_path = check_json_path(path)

    def written() -> None:
        if now is not None:
            now.what = f"after writing {path} and its check {check_path.name}"

    write_json(check_path, report, written)
    agreement = f", top-1 agreement {agree / len(full):.2%} ({agree}/{len(full)})" if scores else ""
    line = (f"max abs difference {report['max_abs_diff']:.2e} (atol {atol:g}, rtol {rtol:g}){agreement} "
            f"on {source}, batch sizes {batches}")
    if not report["passed"]:
        raise ExportError(f"{path} does not compute what the model computes: {line}; the file is kept for "
                          f"inspection; details in {check_path}", exit_code=1)
    print(f"check passed: {line} -> {check_path}")
    return report


def check_batch_size(input_shape: Sequence[int], n_images: int) -> int:
    """How many images the check runs at once: all of them (MNIST's 300), or fewer where they are large (a batch of
    224x224 colour images is gigabytes of activations): at least 2, so that a batch of several is checked."""
    return max(min(n_images, CHECK_BATCH_VALUES // max(math.prod(input_shape), 1)), min(n_images, 2))


def check_images(meta: Mapping[str, Any], data_dir: str | Path | None, n_images: int, *,
                 data_config: Mapping[str, Any] | None = None) -> tuple[Tensor, Tensor | None, str]:
    """``n_images`` test images of the run's data, prepared as its validation prepared them, their labels, and a
    description. ``data_config``: the run's ``data`` (where its images are); ``data_dir`` overrides where.

    IDX data (MNIST, ``data=idx``): the first test images, scaled and normalized as in training; random inputs (no
    labels) when the model takes another image shape. ``data=image_folder``: the run's own test images (its
    ``test/`` folder or held-out part; without one, its validation images), spread over its classes, read with its
    resize, center crop and normalization (the metadata's ``preprocess`` and ``normalize``)."""
    data_config = data_config or {}
    if meta.get("preprocess"):
        return _image_folder_check_images(meta, data_config, data_dir, n_images)
    from modelforge.data.download import find_file, resolve_data_dir
    from modelforge.data.idx import KNOWN_DATASETS, SPLITS, read_checked

    from modelforge.data.options import DERIVED_SETS

    name, shape = str(meta.get("data") or "mnist"), list(meta["input_shape"])
    derived = name if name in DERIVED_SETS else None  # a task's set made from MNIST: checked on its test inputs
    name = "mnist" if derived else name
    dataset = KNOWN_DATASETS.get(name)
    root = resolve_data_dir(data_dir or data_config.get("data_dir"), name)
    images_name, labels_name = SPLITS["test"]
    if (images_at := find_file(root, images_name)) is None:
        raise DataError(f"the check runs the exported model on the {name} test images: no {images_name}[.gz] in "
                        f"{root}; give their folder with data_dir=DIR, or skip the check with check=false")
    images = read_checked(images_at, images_name, None, verify=False)
    if derived is not None and (labels_at := find_file(root, labels_name)) is not None:
        from modelforge.data.mnist_tasks import TEST_SEED, derive

        images = derive(derived, images, read_checked(labels_at, labels_name, None, verify=False).long(), n_images,
                        TEST_SEED, float(data_config.get("noise", 0.3)))[0]
        batch = images.unsqueeze(1).float().div_(255.0)
        if meta.get("normalize"):
            batch = batch.sub_(meta["normalize"]["mean"][0]).div_(meta["normalize"]["std"][0])
        return batch, None, f"{len(batch)} {derived} test inputs"
    images = images[:n_images]
    if [1, *images.shape[1:]] != shape:
        log.warning("the %s test images are %s, the model takes %s: checking on random inputs", name,
                    [1, *images.shape[1:]], shape)
        return torch.randn(n_images, *shape, generator=torch.Generator().manual_seed(0)), None, "random inputs"
    labels_at = find_file(root, labels_name)
    labels = read_checked(labels_at, labels_name, None, verify=False)[:n_images].long() if labels_at else None
    batch = images.unsqueeze(1).float().div_(255.0)
    if meta.get("normalize"):
        batch = batch.sub_(meta["normalize"]["mean"][0]).div_(meta["normalize"]["std"][0])
    title = dataset.title if dataset is not None else name
    return batch, labels, f"{len(batch)} {title} test images"


def _image_folder_check_images(meta: Mapping[str, Any], data_config: Mapping[str, Any],
                               data_dir: str | Path | None, n_images: int) -> tuple[Tensor, Tensor, str]:
    """:func:`check_images` of a ``data=image_folder`` run: its test (else validation) images, as its run split them."""
    from modelforge.data.image_files import index_image_folder
    from modelforge.data.image_transforms import image_batch

    skip = "give the image folder with data_dir=DIR, or skip the check with check=false"
    given = data_dir or data_config.get("root")
    if not given:
        raise DataError("the check runs the exported model on the run's own images, but the model names no image "
                        f"folder (data.root): {skip}")
    root = Path(str(given)).expanduser()
    try:
        index = index_image_folder(root, data_config.get("classes"), float(data_config.get("val_size", 0.1)),
                                   float(data_config.get("test_size", 0.0)), int(data_config.get("seed") or 0))
    except (DataError, ConfigError) as exc:
        raise DataError(f"the check runs the exported model on the run's own images: {exc}; {skip}") from None
    split = "test" if "test" in index.splits else "val"
    items = index.splits[split]
    if len(items) > n_images:  # spread over the split, which is sorted by class: every class is checked
        items = [items[i * len(items) // n_images] for i in range(n_images)]
    batch = image_batch([path for path, _ in items], meta["preprocess"], meta.get("normalize"))
    labels = torch.tensor([label for _, label in items], dtype=torch.long)
    return batch, labels, f"{len(items)} {split} images of {root}"


# --- one message for a model a format cannot take: the exporter's own reason, and which formats work ----------

def _cannot_export(format: str, model: nn.Module, example: Tensor, options: dict[str, Any],
                   exc: BaseException) -> ExportError:
    """The first line of the exception the exporter's error was raised from (its own reason), and the other
    formats that export ``model`` (each tried in memory)."""
    chain = [exc]
    while (earlier := chain[-1].__cause__ or chain[-1].__context__) is not None and earlier not in chain:
        chain.append(earlier)
    others = [f for f in FORMATS if f != format and _probe(f, model, example, options) is not None]
    works = f"formats that work: {', '.join(others)}" if others else "no other format works for it either"
    return ExportError(f"format {format}: {_name(model, _metadata(model))} cannot be exported: {_first_line(chain[-1])}"
                       f"\n  {works}")


def _probe(format: str, model: nn.Module, example: Tensor, options: dict[str, Any]) -> Any:
    """The format's in-memory export of ``model``, or None where it fails."""
    if format == "onnx" and _missing_onnx():
        return None
    try:
        return BUILDERS[format](model, example, **{**options, "method": "trace"})
    except Exception as exc:  # noqa: BLE001 - a probe: any failure means "not this format", but for a signal
        if (stop := stop_behind(exc)) is not None:
            raise stop from None
        return None


# --- helpers -------------------------------------------------------------------------------------------------

def _missing_onnx() -> list[str]:
    import importlib.util

    return [name for name in ONNX_PACKAGES if importlib.util.find_spec(name) is None]


def _need_onnx() -> None:
    if missing := _missing_onnx():
        raise ExportError(f"format onnx needs {', '.join(missing)} (export and its check with onnxruntime): {EXTRA}")


def _checked_choice(key: str, value: Any, choices: Mapping[str, Any] | tuple[str, ...]) -> str:
    if value not in choices:
        raise UnknownNameError(f"export {key}", value, choices, path=key)
    return str(value)


def _check_numbers(**values: Any) -> None:
    for key, value in values.items():
        wanted, least = (float, 0.0 if key == "rtol" else None) if key in ("atol", "rtol") else (int, None)
        if not fits(value, wanted, key) or not math.isfinite(value) or value < 0 or value == 0 and least is None:
            raise ConfigError(key, f"got {value!r}", allowed=f"a {'number' if wanted is float else 'whole number'} "
                                                             f"{'>= 0' if least is not None else '> 0'}")


def _without_hooks(model: nn.Module) -> nn.Module:
    """``model`` as it is exported: in eval mode, on the CPU, without forward hooks (hook plugins are never
    exported). A copy where that changes anything: the caller's module stays as it was, hooks included."""
    hooked = [(m, dict(m._forward_hooks), dict(m._forward_pre_hooks)) for m in model.modules()
              if m._forward_hooks or m._forward_pre_hooks]
    on_cpu = all(t.device.type == "cpu" for t in (*model.parameters(), *model.buffers()))
    if not hooked and not model.training and on_cpu:
        return model
    if hooked:
        names = [n or "the model" for n, m in model.named_modules() if any(m is h[0] for h in hooked)]
        log.warning("leaving the forward hooks of %s out of the export (hook plugins are never exported)",
                    ", ".join(names[:3]) + (", ..." if len(names) > 3 else ""))
    try:
        for module, _, _ in hooked:  # copied without them: a plugin's state is not the model's
            module._forward_hooks.clear()
            module._forward_pre_hooks.clear()
        return copy.deepcopy(model).eval().cpu()
    finally:
        for module, forward_hooks, pre_hooks in hooked:
            module._forward_hooks.update(forward_hooks)
            module._forward_pre_hooks.update(pre_hooks)


def _metadata(model: nn.Module) -> dict[str, Any]:
    meta = getattr(model, "modelforge_meta", None)
    if meta is None:  # a model built in Python: its config, MNIST's preprocessing
        config = getattr(model, "model_config", None) or {"name": type(model).__name__}
        meta = model_metadata({"model": config}, input_shape=getattr(model, "input_shape", None))
    if meta.get("normalize_unknown"):
        raise ExportError(f"the model's input normalization is unknown: {meta['normalize_unknown']}")
    return meta


def _name(model: nn.Module, meta: Mapping[str, Any]) -> str:
    return str((meta.get("model") or {}).get("name") or type(model).__name__)


def _refuse_existing(path: Path) -> None:
    raise ConfigError("output", f"{path} exists (an earlier export); it is left untouched",
                      hint=f"overwrite=true replaces it; output=OTHER{path.suffix} writes another file")


def _output_path(output: str | Path | None, format: str, folder: Path, stem: str, overwrite: bool) -> Path:
    """The file ``output`` names (a folder: ``stem`` + the format's suffix in it; None: in ``folder``), refused
    when it cannot be written or holds an earlier file and ``overwrite`` is false."""
    suffix = FORMATS[format]
    if output is None:
        path = folder / f"{stem}{suffix}"
    elif names_a_folder(output):  # deploy/ is a folder, made when the file is written
        path = Path(output).expanduser() / f"{stem}{suffix}"
    else:
        path = Path(output).expanduser()
        if path.suffix.lower() not in SUFFIXES[format]:
            raise ConfigError("output", f"{output} does not name a {format} file",
                              allowed=f"a folder (deploy/), or a file named *{' or *'.join(SUFFIXES[format])}")
        if not path.parent.is_dir():
            raise ConfigError("output", f"no folder {path.parent.resolve()} to write {path.name} in",
                              hint=f"output={path.parent}/ (a trailing slash) makes the folder")
    path = path.absolute()  # said whole, as run directories are
    check_output_place(path)
    if path.exists() and not overwrite:
        _refuse_existing(path)
    return path


__all__ = ["FORMATS", "check_export", "check_images", "export", "export_task"]

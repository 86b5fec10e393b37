"""``predict``: classify image files with a trained model (a checkpoint, a run directory, an exported
``.pt2``/``.onnx``/TorchScript file): the top-k classes with their probabilities, as a table and a CSV.

Inputs are read and checked, and the output path too, before the model is loaded
(:mod:`modelforge.deploy.images`); the model runs through :mod:`modelforge.deploy.runtime`.
"""

from __future__ import annotations

import csv
import io
import logging
import time
import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import torch
from omegaconf import DictConfig
from PIL import Image
from torch import nn

from modelforge.config import load_config
from modelforge.deploy.images import (
    MAX_PIXELS,
    InputImage,
    Invert,
    check_invert,
    prepare,
    prepare_as_run,
    read_inputs,
)
from modelforge.deploy.paths import check_output_place, names_a_folder
from modelforge.deploy.runtime import Runner, check_model_path, open_model
from modelforge.deploy.task_outputs import format_rows, predict_outputs
from modelforge.errors import ConfigError, DataError
from modelforge.files.atomic import write_text
from modelforge.tasks import build_task

log = logging.getLogger(__name__)

OUTPUTS = Path("outputs") / "predict"  # output=null: outputs/predict/DATE/TIME_XXXXXX/predictions.csv
CSV_NAME = "predictions.csv"
TABLE_ROWS = 100  # more images than this: the table shows the first and last, the CSV holds them all

Inputs = str | Path | Sequence[str | Path] | torch.Tensor


def predict(model_or_path: nn.Module | Runner | str | Path, inputs: Inputs, top_k: int = 3,
            invert: Invert = "auto", batch_size: int = 256, max_pixels: int = MAX_PIXELS) -> list[dict[str, Any]]:
    """The ``top_k`` classes of each image in ``inputs``, most probable first: one row per image,
    ``{"input", "inverted", "class_1", "prob_1", ..., "class_k", "prob_k"}`` (the CSV's columns), with
    ``"label"`` after ``"inverted"`` for an image whose true class is known (an IDX file beside its labels).

    Args:
        model_or_path: a module :func:`modelforge.load_model` gave, a ``.ckpt``, a run directory, or an
            exported ``.pt2``, ``.onnx`` or TorchScript ``.pt`` file.
        inputs: image files (PNG, JPEG, ...), folders of them, globs, IDX images files; or a uint8
            tensor [H, W] / [N, H, W] of gray pixels.
        invert: ``"auto"`` turns an image whose border is light (dark ink on paper) into white-on-black,
            as MNIST's digits are; ``False`` takes every image as it is; ``True`` inverts every one.
        batch_size: images per forward pass (an export with a fixed batch size uses its own).
        max_pixels: an image with more pixels is not read (decoding takes up to 4 bytes a pixel).

    Files that cannot be read are left out with a warning naming each; a DataError when none could be.
    """
    top_k, invert, batch_size = check_top_k(top_k), check_invert(invert), _positive(batch_size, "batch_size")
    images = as_input_images(inputs, _positive(max_pixels, "max_pixels"))  # read before the model loads
    return classify(open_model(model_or_path, max_pixels), images, top_k=top_k, invert=invert, batch_size=batch_size)


def classify(runner: Runner, images: Sequence[InputImage], *, top_k: int = 3, invert: Invert = "auto",
             batch_size: int = 256) -> list[dict[str, Any]]:
    """The rows of :func:`predict` for images already read, with a model already opened."""
    meta = runner.meta
    if not (task := build_task(meta.get("task"))).is_classify:
        raise ConfigError("task", f"the model was trained for task {task.name!r}: predict() gives the classes of a "
                          "classifier", hint="python -m modelforge predict ckpt_path=... inputs=... writes what "
                                             f"a {task.name} model gives")
    if meta.get("preprocess"):  # a data=image_folder run: each image as its validation read its files
        batch, inverted = prepare_as_run(images, meta["preprocess"], meta.get("normalize"), invert)
    else:
        batch, inverted = prepare(images, meta["input_shape"], meta["normalize"], invert)
    names = [str(n) for n in meta["class_names"]]
    probs = torch.softmax(class_scores(runner(batch, chunk=batch_size), names, runner.source), dim=1)
    values, indices = probs.topk(min(top_k, probs.shape[1]), dim=1)
    labels = _label_names(images, names, by_number=not meta.get("preprocess"))
    rows = []
    for image, label, flip, top_p, top_i in zip(images, labels, inverted, values.tolist(), indices.tolist()):
        row: dict[str, Any] = {"input": image.name, "inverted": flip}
        if label is not None:
            row["label"] = label
        for rank, (p, i) in enumerate(zip(top_p, top_i), start=1):
            row[f"class_{rank}"], row[f"prob_{rank}"] = names[i], p
        rows.append(row)
    return rows


def class_scores(output: torch.Tensor, names: Sequence[str], source: str) -> torch.Tensor:
    """``output`` when it is a classifier's scores, one per class of ``names`` ([N, K]); else refused, since a
    headless model's features ([N, 128]) would be read as the scores of 128 classes."""
    if output.dim() != 2 or output.shape[1] != len(names):
        shown = ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")
        shape = ", ".join(["N", *map(str, output.shape[1:])])
        raise ConfigError("ckpt_path", f"{source} outputs [{shape}], not the scores of its "
                          f"{len(names)} classes ({shown}): predict reads a classifier's scores",
                          hint="a model without its head (n_classes: null) or of feature maps gives features: "
                          "predict with the classifier it was cut from")
    return output


def _label_names(images: Sequence[InputImage], names: Sequence[str], by_number: bool) -> list[str | None]:
    """The true class of each image by name, where its input gives one (an IDX labels file: class numbers).

    ``by_number``: the model's classes are numbered as the IDX data set's (a model trained on IDX files). A
    ``data=image_folder`` model's classes are its folders, in their order: a number is its class only where a folder
    is named so (``7``); otherwise the numbers are not compared, and a warning says why."""
    numbers = [image.label for image in images]
    if by_number:
        return [None if k is None else names[k] if k < len(names) else str(k) for k in numbers]
    if any(k is not None and str(k) not in names for k in numbers):
        log.warning("the labels of the IDX inputs are class numbers, and this model's classes are its class folders "
                    "(%s): the labels are not compared", ", ".join(names[:5]) + (", ..." if len(names) > 5 else ""))
        return [None] * len(images)
    return [None if k is None else str(k) for k in numbers]


def as_input_images(inputs: Inputs, max_pixels: int = MAX_PIXELS) -> list[InputImage]:
    """``inputs`` as :class:`InputImage`: paths are read (:func:`read_inputs`); a uint8 tensor of gray pixels
    ([H, W] or [N, H, W]) taken as is, or of [N, C, H, W] with C 1 or 3 (colour: its gray pixels as Pillow
    converts a colour file for a gray model, its colour kept for a colour one)."""
    if not isinstance(inputs, torch.Tensor):
        return read_inputs(inputs, max_pixels).images
    colour = inputs.dim() == 4 and inputs.shape[1] == 3
    if inputs.dtype != torch.uint8 or inputs.dim() not in (2, 3, 4) or inputs.dim() == 4 and inputs.shape[1] not in (1, 3):
        raise DataError(f"inputs: a tensor of images must be uint8 [H, W] or [N, H, W] (gray), or [N, C, H, W] with C "
                        f"1 (gray) or 3 (RGB), got {inputs.dtype} {list(inputs.shape)}")
    if inputs.dim() == 4 and not colour:
        inputs = inputs[:, 0]
    if not colour:
        stack = inputs.unsqueeze(0) if inputs.dim() == 2 else inputs
        return [InputImage(f"tensor[{i}]", image) for i, image in enumerate(stack)]
    rgb = inputs.permute(0, 2, 3, 1).contiguous()  # [N, H, W, 3], as Pillow holds colour
    return [InputImage(f"tensor[{i}]", torch.from_numpy(np.array(Image.fromarray(image.numpy(), "RGB").convert("L"))),
                       rgb=image) for i, image in enumerate(rgb)]


def check_top_k(top_k: object) -> int:
    return _positive(top_k, "top_k")


def _positive(value: object, path: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ConfigError(path, f"got {value!r}", allowed="an integer >= 1")
    return value


def output_path(output: str | Path | None) -> Path:
    """Where the CSV goes: ``output`` (a folder: ``predictions.csv`` in it), or by default a new
    ``outputs/predict/DATE/TIME_XXXXXX/predictions.csv``. Refused before any work when it cannot be written."""
    if output is None or str(output).strip() == "":
        now = datetime.now()
        return (OUTPUTS / now.strftime("%Y-%m-%d") / f"{now:%H-%M-%S}_{uuid.uuid4().hex[:6]}" / CSV_NAME).absolute()
    path = Path(str(output)).expanduser().absolute()
    if names_a_folder(output):
        path = path / CSV_NAME
    check_output_place(path)
    return path


def format_table(rows: Sequence[Mapping[str, Any]], limit: int = TABLE_ROWS) -> str:
    """The rows as a text table: input, whether it was inverted, then ``class  prob%`` for each rank."""
    ranks = sum(1 for key in (rows[0] if rows else {}) if key.startswith("class_"))
    header = ["input", "inverted", *(f"top-{r}" for r in range(1, ranks + 1))]
    shown = list(rows) if len(rows) <= limit else [*rows[:limit // 2], None, *rows[-(limit // 2):]]
    width = max(len(str(row[f"class_{r}"])) for row in rows for r in range(1, ranks + 1)) if rows else 1
    cells = [header] + [
        [f"... {len(rows) - 2 * (limit // 2):,} more rows in the CSV", "", *[""] * ranks] if row is None else
        [str(row["input"]), "yes" if row["inverted"] else "no",
         *(f"{row[f'class_{r}']:<{width}} {100 * row[f'prob_{r}']:5.1f}%" for r in range(1, ranks + 1))]
        for row in shown]
    widths = [max(len(c[i]) for c in cells if not c[0].startswith("... ")) for i in range(len(header))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(line, widths)).rstrip() for line in cells)


def csv_text(rows: Sequence[Mapping[str, Any]]) -> str:
    """The rows as CSV: ``input,inverted[,label],class_1,prob_1,...``; probabilities with 6 decimals; an image
    without a label (beside others with one) has an empty one."""
    buffer = io.StringIO()
    if rows:
        columns = list(dict.fromkeys(key for row in sorted(rows, key=lambda row: "label" not in row) for key in row))
        writer = csv.DictWriter(buffer, fieldnames=columns, lineterminator="\n")
        writer.writeheader()
        writer.writerows({k: f"{v:.6f}" if k.startswith("prob_") else v for k, v in row.items()} for row in rows)
    return buffer.getvalue()


def predict_task(cfg: Mapping[str, Any] | DictConfig) -> list[dict[str, Any]]:
    """``python -m modelforge predict ckpt_path=... inputs=...``: everything checked, then read, then run."""
    options = load_config(cfg)
    top_k, invert = check_top_k(options.get("top_k", 3)), check_invert(options.get("invert", "auto"))
    batch_size = _positive(options.get("batch_size", 256), "batch_size")
    max_pixels = _positive(options.get("max_pixels", MAX_PIXELS), "max_pixels")
    output = output_path(options.get("output"))
    check_model_path(options.get("ckpt_path"))
    found = read_inputs(options.get("inputs"), max_pixels)
    runner = open_model(options["ckpt_path"], max_pixels)
    started = time.perf_counter()
    if not (task := build_task(runner.meta.get("task"))).is_classify:  # masks, images, labels or numbers
        rows = predict_outputs(runner, found.images, task, output.parent, invert=invert, batch_size=batch_size)
        print(format_rows(rows))
        write_text(output, csv_text(rows))
        print(f"{len(rows):,} image{'s' if len(rows) != 1 else ''} run through {runner.source} (task {task.name}) in "
              f"{time.perf_counter() - started:.2f} s" + (f"; files written under {output.parent}"
                                                          if task.output in ("class_map", "image") else ""))
        print(f"predictions written to {output}")
        return rows
    rows = classify(runner, found.images, top_k=top_k, invert=invert, batch_size=batch_size)
    seconds = time.perf_counter() - started
    print(format_table(rows))
    write_text(output, csv_text(rows))
    flipped = sum(row["inverted"] for row in rows)
    unread = len(found.unreadable)
    print(f"{len(rows):,} image{'s' if len(rows) != 1 else ''} classified by {runner.source} in {seconds:.2f} s"
          + (f"; {flipped:,} inverted to white-on-black (invert={_word(invert)})" if flipped else "")
          + (f"; {unread:,} file{'s' if unread != 1 else ''} could not be read (listed above)" if unread else ""))
    if labelled := [row for row in rows if "label" in row]:
        hits = sum(row["class_1"] == row["label"] for row in labelled)
        print(f"top-1 accuracy {hits / len(labelled):.4f} ({hits:,} of {len(labelled):,} images right, labels "
              f"from {', '.join(str(p) for p in found.label_files)})")
    print(f"predictions written to {output}")
    return rows


def _word(invert: Invert) -> str:
    return invert if isinstance(invert, str) else str(invert).lower()

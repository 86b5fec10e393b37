"""What ``predict`` gives for a task other than classify (:mod:`modelforge.tasks`), one row per image.

- segment: a mask PNG per image at the image's own size, a palette PNG whose pixel values are the class indices,
  and an overlay (the image with each class's colour over it), in ``masks/`` and ``overlays/`` beside the CSV;
- reconstruct: the output image, at the input's size, in ``outputs/``;
- multilabel: the labels whose probability is above ``task.threshold``, and each label's probability;
- regress: the numbers.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image

from modelforge.deploy.images import InputImage, Invert, prepare
from modelforge.deploy.runtime import Runner
from modelforge.files.atomic import write_bytes
from modelforge.report.class_colours import palette
from modelforge.tasks import Task

def predict_outputs(runner: Runner, images: Sequence[InputImage], task: Task, out_dir: Path, *,
                    invert: Invert = "auto", batch_size: int = 256) -> list[dict[str, Any]]:
    """Run ``images`` through the model and say (and write under ``out_dir``) what ``task`` makes of each."""
    meta = runner.meta
    batch, inverted = prepare(images, meta["input_shape"], meta["normalize"], invert)
    output = runner(batch, chunk=batch_size)
    names = [str(n) for n in meta.get("class_names") or ()]
    rows: list[dict[str, Any]] = []
    stems = _unique_stems(images)
    for i, (image, flip) in enumerate(zip(images, inverted)):
        row: dict[str, Any] = {"input": image.name, "inverted": flip}
        if task.output == "class_map":
            mask = _back_to(output[i].argmax(0).to(torch.uint8), image.pixels.shape, Image.Resampling.NEAREST)
            row["mask"] = _write_png(out_dir / "masks" / f"{stems[i]}.png", _mask_png(mask))
            row["overlay"] = _write_png(out_dir / "overlays" / f"{stems[i]}.png", _overlay(image.pixels, mask))
            present = [int(k) for k in mask.unique().tolist() if k]
            row["classes"] = " ".join(names[k] if k < len(names) else str(k) for k in present)
        elif task.output == "image":
            pixels = output[i].clamp(0, 1).mul(255).round().to(torch.uint8)[0]
            pixels = _back_to(pixels, image.pixels.shape, Image.Resampling.BILINEAR)
            row["output"] = _write_png(out_dir / "outputs" / f"{stems[i]}.png", Image.fromarray(pixels.numpy(), "L"))
        elif task.output == "labels":
            probs = output[i].sigmoid().tolist()
            label_names = names if len(names) == len(probs) else [str(k) for k in range(len(probs))]
            row["labels"] = " ".join(n for n, p in zip(label_names, probs) if p > task.threshold)
            row.update({f"p_{n}": round(p, 6) for n, p in zip(label_names, probs)})
        else:  # numbers
            values = output[i].reshape(-1).tolist()
            target_names = names if len(names) == len(values) else [f"target_{k}" for k in range(len(values))]
            row.update({n: round(v, 6) for n, v in zip(target_names, values)})
        rows.append(row)
    return rows


def _unique_stems(images: Sequence[InputImage]) -> list[str]:
    """A file name per image: its stem, numbered where two images share one (or an IDX file's ``FILE[i]``)."""
    stems, seen = [], set()
    for i, image in enumerate(images):
        stem = Path(image.name.replace("[", "_").replace("]", "")).stem or f"image_{i}"
        stem = stem if stem not in seen else f"{stem}_{i}"
        seen.add(stem)
        stems.append(stem)
    return stems


def _back_to(pixels: torch.Tensor, size: Sequence[int], resample: Image.Resampling) -> torch.Tensor:
    """A model-sized map at an input's ``size`` (H, W), undoing ``fit_to``'s padding to the model's aspect ratio."""
    h, w = int(size[0]), int(size[1])
    height, width = pixels.shape
    if (h, w) == (height, width):
        return pixels
    new_h, new_w = (max(h, -(-w * height // width)), max(w, -(-h * width // height))) if h * width != w * height \
        else (h, w)
    big = np.array(Image.fromarray(pixels.numpy()).resize((new_w, new_h), resample), dtype=np.uint8)
    top, left = (new_h - h) // 2, (new_w - w) // 2
    return torch.from_numpy(big[top:top + h, left:left + w].copy())


def _mask_png(mask: torch.Tensor) -> Image.Image:
    picture = Image.fromarray(mask.numpy(), "P")
    picture.putpalette(palette())
    return picture


def _overlay(pixels: torch.Tensor, mask: torch.Tensor, alpha: float = 0.5) -> Image.Image:
    gray = pixels.float().unsqueeze(-1).expand(*pixels.shape, 3)
    colours = torch.tensor(palette(), dtype=torch.float32).view(256, 3)[mask.long()]
    mixed = torch.where((mask > 0).unsqueeze(-1), (1 - alpha) * gray + alpha * colours, gray)
    return Image.fromarray(mixed.round().to(torch.uint8).numpy(), "RGB")


def _write_png(path: Path, picture: Image.Image) -> str:
    buffer = io.BytesIO()
    picture.save(buffer, format="PNG")
    path.parent.mkdir(parents=True, exist_ok=True)
    write_bytes(path, buffer.getvalue())
    return str(path)


def format_rows(rows: Sequence[dict[str, Any]], limit: int = 100) -> str:
    """The rows as a text table, one column per key (files by name only: the folder is said below it)."""
    if not rows:
        return ""
    columns = list(rows[0])
    shown = list(rows) if len(rows) <= limit else [*rows[:limit // 2], *rows[-(limit // 2):]]

    def cell(key: str, value: Any) -> str:
        if key in ("mask", "overlay", "output"):
            return Path(str(value)).name
        if isinstance(value, bool):
            return "yes" if value else "no"
        return f"{value:.4f}" if isinstance(value, float) else str(value)

    cells = [columns] + [[cell(k, row.get(k, "")) for k in columns] for row in shown]
    widths = [max(len(line[i]) for line in cells) for i in range(len(columns))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(line, widths)).rstrip() for line in cells)

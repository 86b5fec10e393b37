"""The images ``predict`` classifies: finding them (files, folders, globs, IDX files), reading them, and
preparing them as the training batches were (grayscale, the model's size, the data set's normalization).

Everything is read and checked by :func:`read_inputs` before any model is loaded: a bad input is one
:class:`~modelforge.errors.DataError` naming the file.
"""

from __future__ import annotations

import glob
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from PIL import Image, ImageOps, UnidentifiedImageError

from modelforge.data.idx import IMAGES_MAGIC, parse_idx, read_idx_bytes
from modelforge.errors import ConfigError, DataError

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff", ".webp")
IDX_SUFFIXES = (".idx", "-ubyte", ".idx.gz", "-ubyte.gz")
INVERT_CHOICES = ("auto", True, False)
# invert=auto: an image whose border is brighter than this (of 255) is dark ink on a light ground.
LIGHT_BORDER = 127.5

Invert = bool | Literal["auto"]


@dataclass(frozen=True)
class InputImage:
    """One image to classify: ``name`` (its file, or ``FILE[i]`` inside an IDX file) and its gray pixels."""

    name: str
    pixels: torch.Tensor  # uint8 [H, W]


def check_invert(invert: object, path: str = "invert") -> Invert:
    """``invert`` if it is one of ``auto``, ``true``, ``false``; else a ConfigError."""
    if isinstance(invert, str) and invert.lower() in ("auto", "true", "false"):
        return "auto" if invert.lower() == "auto" else invert.lower() == "true"
    if invert not in INVERT_CHOICES or isinstance(invert, (int, float)) and not isinstance(invert, bool):
        raise ConfigError(path, f"got {invert!r}", allowed="auto (invert an image with a light border), "
                          "false (white digits on black, as MNIST), true (dark digits on a light ground)")
    return invert  # type: ignore[return-value]


def is_idx_name(path: Path) -> bool:
    return path.name.lower().endswith(IDX_SUFFIXES)


def find_input_files(inputs: str | Path | Sequence[str | Path]) -> list[Path]:
    """The image and IDX files ``inputs`` names: files, folders (their images, sorted), globs; in that order.

    Raises ConfigError when ``inputs`` is empty and DataError when an entry matches no file.
    """
    entries = [inputs] if isinstance(inputs, (str, Path)) else list(inputs or [])
    if not entries or any(str(e).strip() == "" for e in entries):
        raise ConfigError("inputs", "missing: which images to classify", allowed="image files (PNG, JPEG), "
                          "a folder of them, a glob ('digits/*.png') or an IDX images file",
                          hint="predict ckpt_path=RUN/checkpoints/last.ckpt inputs=my_digits/")
    found: list[Path] = []
    for entry in entries:
        path = Path(str(entry)).expanduser()
        if path.is_dir():
            images = sorted(p for p in path.iterdir() if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES)
            if not images:
                idx = sorted(p.name for p in path.iterdir() if is_idx_name(p) and "images" in p.name)
                hint = f"\n  hint: name an IDX file: inputs={path / idx[0]}" if idx else ""
                raise DataError(f"inputs: no images in folder {path.resolve()} "
                                f"(looked for {', '.join(IMAGE_SUFFIXES)}){hint}")
            found += images
        elif path.is_file():
            found.append(path)
        elif glob.has_magic(str(path)):
            matched = [Path(p) for p in sorted(glob.glob(str(path), recursive=True)) if Path(p).is_file()]
            kept = [p for p in matched if p.suffix.lower() in IMAGE_SUFFIXES or is_idx_name(p)]
            if not kept:
                other = f" ({len(matched)} other files: {', '.join(p.name for p in matched[:3])})" if matched else ""
                raise DataError(f"inputs: no images match {str(entry)!r}{other}")
            found += kept
        else:
            raise DataError(f"inputs: no file or folder {str(entry)!r} (looked for {path.resolve()})")
    return list(dict.fromkeys(found))  # a file named twice is classified once


def read_inputs(inputs: str | Path | Sequence[str | Path]) -> list[InputImage]:
    """Every image ``inputs`` names, read and decoded to gray uint8 pixels; a DataError for the first bad one."""
    images: list[InputImage] = []
    for path in find_input_files(inputs):
        images += read_idx_images(path) if is_idx_name(path) else [InputImage(str(path), read_image(path))]
    return images


def read_image(path: Path) -> torch.Tensor:
    """The gray uint8 [H, W] pixels of an image file. Transparent parts count as white paper (a drawing
    exported with a transparent ground), 16-bit images are scaled to 8 bits, EXIF rotation is applied."""
    try:
        with Image.open(path) as opened:
            image = ImageOps.exif_transpose(opened)
            image.load()
    except (UnidentifiedImageError, Image.DecompressionBombError) as exc:
        raise DataError(f"inputs: {path} is not an image Pillow can read ({exc})") from None
    except (OSError, ValueError, SyntaxError) as exc:  # truncated or corrupt data
        raise DataError(f"inputs: {path} cannot be read as an image ({exc})") from None
    if image.mode in ("I", "I;16", "I;16B", "I;16L", "F"):
        wide = np.asarray(image, dtype=np.float64)
        scale = 1.0 if wide.max(initial=0) <= 255 else 255.0 / 65535.0
        return torch.from_numpy(np.clip(np.rint(wide * scale), 0, 255).astype(np.uint8))
    if image.mode in ("RGBA", "LA", "PA") or image.mode == "P" and "transparency" in image.info:
        rgba = image.convert("RGBA")
        image = Image.alpha_composite(Image.new("RGBA", rgba.size, (255, 255, 255, 255)), rgba)
    return torch.from_numpy(np.array(image.convert("L"), dtype=np.uint8))


def read_idx_images(path: Path) -> list[InputImage]:
    """The images of an IDX images file (magic 2051; ``.gz`` read as gzip), named ``FILE[i]``."""
    pixels = parse_idx(read_idx_bytes(path), magic=IMAGES_MAGIC, where=f"inputs: {path}")
    if len(pixels) == 0:
        raise DataError(f"inputs: {path} holds no images")
    return [InputImage(f"{path}[{i}]", image) for i, image in enumerate(pixels)]


def border_mean(pixels: torch.Tensor) -> torch.Tensor:
    """Mean brightness of the outer ring of each image of ``pixels`` [..., H, W] (1 px per 28 of the shorter
    side, at least 1): the paper, not the ink. A float64 tensor of the leading shape."""
    h, w = pixels.shape[-2:]
    k = max(1, round(min(h, w) / 28))
    total = pixels.double().sum(dim=(-2, -1))
    if h <= 2 * k or w <= 2 * k:
        return total / (h * w)
    inner = pixels[..., k:-k, k:-k].double().sum(dim=(-2, -1))
    return (total - inner) / (h * w - (h - 2 * k) * (w - 2 * k))


def fit_to(pixels: torch.Tensor, size: Sequence[int]) -> torch.Tensor:
    """``pixels`` at ``size`` (H, W): padded with its border's brightness to the same aspect ratio (a
    digit is not stretched), then resized with Pillow's Lanczos filter (antialiased; of Pillow's filters, the
    closest to the original after MNIST digits went to 100x100 and back). Same size: unchanged."""
    height, width = int(size[0]), int(size[1])
    h, w = pixels.shape
    if (h, w) == (height, width):
        return pixels
    if h * width != w * height:  # pad the short side to the model's aspect ratio
        new_h, new_w = max(h, -(-w * height // width)), max(w, -(-h * width // height))
        padded = torch.full((new_h, new_w), int(border_mean(pixels).round()), dtype=torch.uint8)
        top, left = (new_h - h) // 2, (new_w - w) // 2
        padded[top:top + h, left:left + w] = pixels
        pixels = padded
    resized = Image.fromarray(pixels.numpy()).resize((width, height), Image.Resampling.LANCZOS)
    return torch.from_numpy(np.array(resized, dtype=np.uint8))


def prepare(images: Sequence[InputImage], input_shape: Sequence[int], normalize: Mapping[str, Any] | None,
            invert: Invert = "auto") -> tuple[torch.Tensor, list[bool]]:
    """A batch float32 [N, C, H, W] as training made it (``x / 255``, then ``(x - mean) / std`` unless
    ``normalize`` is None), and which images were inverted to white-on-black.

    ``input_shape`` is the model's [C, H, W]: the gray image is repeated over C channels. ``normalize``:
    ``{"mean", "std"}``, each a number or one per channel (the metadata's lists).
    """
    channels, height, width = (int(v) for v in input_shape)
    pixels = torch.empty((len(images), height, width), dtype=torch.uint8)
    inverted = torch.zeros(len(images), dtype=torch.bool)
    by_size: dict[tuple[int, ...], list[int]] = {}
    for i, image in enumerate(images):
        by_size.setdefault(tuple(image.pixels.shape), []).append(i)
    for size, index in by_size.items():  # one tensor op per size: an IDX file of 10,000 images is one
        stack = torch.stack([images[i].pixels for i in index])
        flip = border_mean(stack) > LIGHT_BORDER if invert == "auto" else torch.full((len(index),), bool(invert))
        stack = torch.where(flip.view(-1, 1, 1), 255 - stack, stack)
        inverted[index] = flip
        pixels[index] = stack if size == (height, width) else torch.stack([fit_to(p, (height, width)) for p in stack])
    batch = pixels.unsqueeze(1).float().div_(255.0)
    if normalize is not None:
        mean, std = _per_channel(normalize["mean"], channels), _per_channel(normalize["std"], channels)
        batch = torch.cat([batch.clone().sub_(m).div_(s) for m, s in zip(mean, std)], dim=1)
    elif channels > 1:
        batch = batch.repeat(1, channels, 1, 1)
    return batch, inverted.tolist()


def _per_channel(value: float | Sequence[float], channels: int) -> list[float]:
    """A mean or std from the metadata (one number, or one per channel) as one float per channel."""
    values = [float(v) for v in value] if isinstance(value, Sequence) else [float(value)]
    return values * channels if len(values) == 1 else values

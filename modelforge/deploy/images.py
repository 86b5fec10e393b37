"""The images ``predict`` classifies: finding them (files, folders, globs, IDX files), reading them, and
preparing them as the training batches were (grayscale, the model's size, the data set's normalization).

Everything is read and checked by :func:`read_inputs` before any model is loaded. A file that cannot be read
(empty, not an image, cut short, too many pixels) is left out and named with its reason; a DataError only
when no file could be read. A large image is shrunk as it is decoded: memory follows the pixels decoded
once (1 byte each for gray, 4 for color), never a copy of them per step.
"""

from __future__ import annotations

import glob
import logging
import os
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from PIL import Image, ImageOps, UnidentifiedImageError

from modelforge.data.idx import IMAGES_MAGIC, LABELS_MAGIC, parse_idx, read_idx_bytes
from modelforge.data.image_files import MAX_PIXELS  # one cap for predict and for training on image folders
from modelforge.errors import ConfigError, DataError
from modelforge.files.paths import why_not_readable_file

log = logging.getLogger(__name__)

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff", ".webp")
IDX_SUFFIXES = (".idx", "-ubyte", ".idx.gz", "-ubyte.gz")
INVERT_CHOICES = ("auto", True, False)
# invert=auto: an image whose border is brighter than this (of 255) is dark ink on a light ground.
LIGHT_BORDER = 127.5
# A decoded image whose shorter side is 2 * KEEP_SIDE or more is reduced at once (box filter, by a whole factor) to a
# shorter side of KEEP_SIDE to 2 * KEEP_SIDE - 1, 9 times and more an MNIST-sized model's input side; a JPEG is
# decoded near that size (Pillow's draft: at 1/2 to 1/8 scale, in gray).
KEEP_SIDE = 256
# Modes Pillow's reduce() refuses or gets wrong (it would average palette indices): reduced as these.
_REDUCED_AS = {"1": "L", "P": "RGBA", "PA": "RGBA", "I;16": "I", "I;16B": "I", "I;16L": "I", "I;16N": "I"}
LISTED = 10  # unreadable files named in one message; the rest are counted

Invert = bool | Literal["auto"]


@dataclass(frozen=True)
class InputImage:
    """One image to classify: ``name`` (its file, or ``FILE[i]`` inside an IDX file) and its gray pixels."""

    name: str
    pixels: torch.Tensor  # uint8 [H, W]
    label: int | None = None  # the true class, where the input says it (an IDX images file beside its labels)
    file: Path | None = None  # the image file it was read from, read again in colour for a data=image_folder model
    rgb: torch.Tensor | None = None  # uint8 [H, W, 3]: the colour pixels of a tensor given in colour


@dataclass
class ReadInputs:
    """What :func:`read_inputs` found: the images it could read, and for each file it could not, why."""

    images: list[InputImage] = field(default_factory=list)
    unreadable: list[str] = field(default_factory=list)  # "FILE is empty (0 bytes)", ...
    label_files: list[Path] = field(default_factory=list)  # where the images' labels came from


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
    """The image and IDX files ``inputs`` names: files, folders (their images, sorted), globs; in that order,
    each real file once (a ``**`` glob through a symlink to a parent folder meets the same files again and again).
    Entries named like images that are no files to read (a dangling or looping symlink, a FIFO) are kept for
    :func:`read_inputs` to name and skip.

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
            images = sorted(p for p in path.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES and not p.is_dir())
            if not images:
                idx = sorted(p.name for p in path.iterdir() if is_idx_name(p) and "images" in p.name)
                hint = f"\n  hint: name an IDX file: inputs={path / idx[0]}" if idx else ""
                raise DataError(f"inputs: no images in folder {path.resolve()} "
                                f"(looked for {', '.join(IMAGE_SUFFIXES)}){hint}")
            found += images
        elif os.path.lexists(path):  # a file, or what stands where one was named (a dangling symlink, a FIFO)
            found.append(path)
        elif glob.has_magic(str(path)):
            matched = [Path(p) for p in sorted(glob.glob(str(path), recursive=True)) if not Path(p).is_dir()]
            kept = [p for p in matched if p.suffix.lower() in IMAGE_SUFFIXES or is_idx_name(p)]
            if not kept:
                other = f" ({len(matched)} other files: {', '.join(p.name for p in matched[:3])})" if matched else ""
                raise DataError(f"inputs: no images match {str(entry)!r}{other}")
            found += kept
        else:
            raise DataError(f"inputs: no file or folder {str(entry)!r} (looked for {path.resolve()})")
    first: dict[tuple[int, int] | Path, Path] = {}
    again = [(p, first[key]) for p in found if (key := _identity(p)) in first or first.setdefault(key, p) is not p]
    again = [(p, f) for p, f in again if p != f]  # a name given twice is plainly one file
    if again:  # hard links, a symlink and its target, a glob and a name of one file: one row, said
        log.warning("%d name%s of files already named left out (one row per file): %s", len(again),
                    "s" if len(again) > 1 else "", ", ".join(f"{p} (= {f})" for p, f in again[:LISTED])
                    + (f", ... and {len(again) - LISTED:,} more" if len(again) > LISTED else ""))
    return list(first.values())  # each file by its first name


def _identity(path: Path) -> tuple[int, int] | Path:
    """What makes two names one file: its device and inode (those of a symlink that leads nowhere itself)."""
    for look in (os.stat, os.lstat):
        try:
            found = look(path)
        except OSError:
            continue
        return (found.st_dev, found.st_ino)
    return path


def read_inputs(inputs: str | Path | Sequence[str | Path], max_pixels: int = MAX_PIXELS) -> ReadInputs:
    """Every image ``inputs`` names, decoded to gray uint8 pixels; the files that cannot be read are left out,
    named with their reason (logged as a warning). A DataError when no file could be read, or ``inputs`` names
    nothing that exists. What is not a regular file (a FIFO, a dangling symlink) is named and never opened."""
    found = ReadInputs()
    files = find_input_files(inputs)
    for path in files:
        try:
            if (why := why_not_readable_file(path, "an image file")) is not None:
                raise DataError(f"{path} {why}")
            if path.stat().st_size == 0:
                raise DataError(f"{path} is empty (0 bytes)")
            images = (read_idx_images(path) if is_idx_name(path) else
                      [InputImage(str(path), read_image(path, max_pixels), file=path)])
        except DataError as exc:
            found.unreadable.append(str(exc))
            continue
        found.images += images
        if images[0].label is not None:
            found.label_files.append(labels_path(path))
    if not found.images:
        raise DataError(f"inputs: {found.unreadable[0]}" if len(found.unreadable) == 1 else
                        f"inputs: none of the {len(files):,} files could be read:\n{_listed(found.unreadable)}")
    if found.unreadable:
        log.warning("could not read %d of %d files; the others are classified:\n%s", len(found.unreadable),
                    len(files), _listed(found.unreadable))
    return found


def _listed(reasons: Sequence[str]) -> str:
    more = f"\n  ... and {len(reasons) - LISTED:,} more" if len(reasons) > LISTED else ""
    return "\n".join(f"  {reason}" for reason in reasons[:LISTED]) + more


_PILLOW_LIMIT = threading.Lock()


@contextmanager
def _own_pixel_limit() -> Iterator[None]:
    """Pillow's own bound (a warning with its site-packages path at 89 megapixels, an error at 179) gives way to
    ``max_pixels``, checked from the header before any pixel is decoded."""
    with _PILLOW_LIMIT:
        saved, Image.MAX_IMAGE_PIXELS = Image.MAX_IMAGE_PIXELS, None
        try:
            yield
        finally:
            Image.MAX_IMAGE_PIXELS = saved


class NonFinitePixels(ValueError):
    """A float image (a TIFF of mode F) with NaN or infinite pixels: ``bad`` of ``total``."""

    def __init__(self, bad: int, total: int) -> None:
        super().__init__(f"{bad} of {total} pixels are not finite")
        self.bad, self.total = bad, total


def read_image(path: Path, max_pixels: int = MAX_PIXELS) -> torch.Tensor:
    """The gray uint8 [H, W] pixels of an image file. Transparent parts count as white paper (a drawing
    exported with a transparent ground), 16-bit images are scaled to 8 bits, EXIF rotation is applied; an
    image larger than needed is shrunk as it is decoded (see KEEP_SIDE). A DataError names the file."""
    try:
        with _own_pixel_limit():
            opened = Image.open(path)
        with opened:
            width, height = opened.size
            if width * height > max_pixels:
                raise DataError(f"{path} is {width:,}x{height:,} pixels ({width * height / 1e6:,.1f} megapixels), "
                                f"more than max_pixels={max_pixels:,}: shrink it, or raise max_pixels (decoding "
                                "takes up to 4 bytes a pixel)")
            if opened.format == "JPEG" and min(opened.size) >= 2 * KEEP_SIDE:
                opened.draft("L", (width * KEEP_SIDE // min(opened.size), height * KEEP_SIDE // min(opened.size)))
            opened.load()
            ImageOps.exif_transpose(opened, in_place=True)
            sixteen_bit = opened.mode.startswith("I;16")  # reduce() needs mode I, which has no depth of its own
            if (factor := min(opened.size) // KEEP_SIDE) < 2:
                return _gray(opened, sixteen_bit)
            image = opened.convert(_REDUCED_AS[opened.mode]) if opened.mode in _REDUCED_AS else opened  # no copy
            return _gray(image.reduce(factor), sixteen_bit)
    except NonFinitePixels as exc:
        raise DataError(f"{path} has {exc.bad:,} of its {exc.total:,} pixels not a number (NaN or infinite): "
                        "refused, as they leave no scale for the others") from None
    except (UnidentifiedImageError, Image.DecompressionBombError) as exc:
        raise DataError(f"{path} is not an image Pillow can read ({exc})") from None
    except (OSError, ValueError, SyntaxError) as exc:  # truncated or corrupt data
        raise DataError(f"{path} cannot be read as an image ({exc})") from None


def _gray(image: Image.Image, sixteen_bit: bool = False) -> torch.Tensor:
    from modelforge.data.image_transforms import WIDE_GRAY_MODES, eight_bit  # as a data=image_folder run reads it

    if image.mode in WIDE_GRAY_MODES:
        wide = np.asarray(image, dtype=np.float64)
        if (bad := int(wide.size - np.count_nonzero(np.isfinite(wide)))) > 0:  # one NaN would scale all to black
            raise NonFinitePixels(bad, int(wide.size))
        return torch.from_numpy(np.array(eight_bit(image, sixteen_bit or None), dtype=np.uint8))
    if image.mode in ("RGBA", "LA", "PA") or image.mode == "P" and "transparency" in image.info:
        rgba = image.convert("RGBA")
        image = Image.alpha_composite(Image.new("RGBA", rgba.size, (255, 255, 255, 255)), rgba)
    return torch.from_numpy(np.array(image.convert("L"), dtype=np.uint8))


def read_idx_images(path: Path) -> list[InputImage]:
    """The images of an IDX images file (magic 2051; ``.gz`` read as gzip), named ``FILE[i]``, with their
    labels when the labels file of the same name is beside it (``t10k-images`` -> ``t10k-labels``)."""
    pixels = parse_idx(read_idx_bytes(path), magic=IMAGES_MAGIC, where=str(path))
    if len(pixels) == 0:
        raise DataError(f"{path} holds no images")
    labels = _labels_beside(path, len(pixels))
    return [InputImage(f"{path}[{i}]", image, None if labels is None else int(labels[i]))
            for i, image in enumerate(pixels)]


def labels_path(images: Path) -> Path | None:
    """The labels file beside the IDX images file ``images`` (``X-images-idx3-ubyte[.gz]`` ->
    ``X-labels-idx1-ubyte[.gz]``, either compression), or None."""
    name = images.name.replace("images-idx3", "labels-idx1").removesuffix(".gz")
    if name == images.name.removesuffix(".gz"):
        return None
    return next((p for p in (images.with_name(name), images.with_name(name + ".gz")) if p.is_file()), None)


def _labels_beside(images: Path, count: int) -> torch.Tensor | None:
    if (path := labels_path(images)) is None:
        return None
    try:
        labels = parse_idx(read_idx_bytes(path), magic=LABELS_MAGIC, where=str(path))
    except DataError as exc:
        log.warning("the labels beside %s are not used: %s", images.name, exc)
        return None
    if len(labels) != count:
        log.warning("the labels beside %s are not used: %s holds %d labels for %d images", images.name, path.name,
                    len(labels), count)
        return None
    return labels


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


def prepare_as_run(images: Sequence[InputImage], preprocess: Mapping[str, Any], normalize: Mapping[str, Any] | None,
                   invert: Invert = "auto") -> tuple[torch.Tensor, list[bool]]:
    """The batch of a ``data=image_folder`` model (``preprocess``: its metadata's): each image as the run's
    validation read its files (resize, center crop, its mean and std, in colour or gray as it trained).

    An image file is read again from the file, in colour; an image given as pixels (an IDX file, a tensor) goes
    the same way as a file holding those pixels would: gray pixels become RGB by repeating the one channel, as
    Pillow converts a gray PNG (the run's own gray files were read so). The run inverted no image: ``auto`` and
    ``false`` invert none, ``true`` every one."""
    from modelforge.data.image_transforms import metadata_pipeline

    pipeline, flip = metadata_pipeline(preprocess, normalize), invert is True
    batch = []
    for image in images:
        if image.file is not None:
            picture = pipeline.decode(str(image.file))
        else:
            picture = Image.fromarray(image.rgb.numpy(), "RGB") if image.rgb is not None else \
                Image.fromarray(image.pixels.numpy(), "L")
        batch.append(pipeline.from_image(ImageOps.invert(picture.convert(pipeline.mode)) if flip else picture))
    return torch.stack(batch), [flip] * len(images)


def _per_channel(value: float | Sequence[float], channels: int) -> list[float]:
    """A mean or std from the metadata (one number, or one per channel) as one float per channel."""
    values = [float(v) for v in value] if isinstance(value, Sequence) else [float(value)]
    return values * channels if len(values) == 1 else values

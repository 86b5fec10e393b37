"""One image of ``data=image_folder`` from its file to a float tensor, in a DataLoader worker: Pillow and torch ops.

Validation, test and ``predict`` see what torchvision's weights were evaluated on (``weights.transforms()``):
the shorter side resized to ``resize_size`` (antialiased), a center crop of ``image_size``, ``(x - mean) / std``.
Training takes a random resized crop (torchvision's ``RandomResizedCrop``: a part of the image of a random area and
aspect, resized to ``image_size``) and a random horizontal flip. Random draws come from torch's generator, which
Lightning's ``seed_everything(workers=True)`` seeds in every worker.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from PIL import Image, ImageOps, UnidentifiedImageError
from torch import Tensor
from torch.utils.data import Dataset

from modelforge.data.image_files import Item
from modelforge.data.options import IMAGENET_MEAN, IMAGENET_STD
from modelforge.errors import DataError

log = logging.getLogger(__name__)

RESAMPLING = {"bilinear": Image.Resampling.BILINEAR, "bicubic": Image.Resampling.BICUBIC}
ASPECT = (3 / 4, 4 / 3)  # RandomResizedCrop's range of aspect ratios
DECODE_ERRORS = (UnidentifiedImageError, Image.DecompressionBombError, OSError, ValueError, SyntaxError)


WIDE_GRAY_MODES = ("I", "I;16", "I;16B", "I;16L", "I;16N", "F")  # Pillow's gray modes of more than 8 bits


def eight_bit(image: Image.Image, sixteen_bit: bool | None = None) -> Image.Image:
    """A gray image of more than 8 bits as 8-bit ``L``, scaled by its depth: Pillow's ``convert("L")`` clips every
    value above 255 to white (a 16-bit PNG's digit became a white blot). A 16-bit file (Pillow's ``I;16``, or
    ``sixteen_bit``) is scaled from 0..65535; a 32-bit or float image (``I``, ``F``: no depth in the file) from
    0..65535 where a value passes 255, else taken as 8-bit values. Other modes are returned as they are."""
    if image.mode not in WIDE_GRAY_MODES:
        return image
    wide = np.asarray(image, dtype=np.float64)
    if sixteen_bit is None:
        sixteen_bit = image.mode.startswith("I;16") or wide.max(initial=0) > 255
    scaled = np.rint(wide * (255.0 / 65535.0 if sixteen_bit else 1.0))
    return Image.fromarray(np.clip(np.nan_to_num(scaled), 0, 255).astype(np.uint8), "L")


@dataclass(frozen=True)
class ImagePipeline:
    """Decode, crop, resize, flip and normalize one image file: float32 [C, image_size, image_size]."""

    image_size: int = 224
    resize_size: int = 256
    interpolation: str = "bilinear"
    mean: tuple[float, ...] = IMAGENET_MEAN
    std: tuple[float, ...] = IMAGENET_STD
    normalize: bool = True
    grayscale: bool = False
    random_resized_crop: tuple[float, float] | None = None  # training: the range of the crop's area
    horizontal_flip: bool = False

    def __call__(self, path: str) -> Tensor:
        return self.to_tensor(self.prepare(self.decode(path)))

    @property
    def mode(self) -> str:
        """Pillow's mode of the images the model sees: ``L`` (gray) or ``RGB``."""
        return "L" if self.grayscale else "RGB"

    def decode(self, path: str) -> Image.Image:
        """The image, upright (EXIF orientation), as RGB or L; a JPEG much larger than needed is decoded smaller."""
        with Image.open(path) as opened:
            if self.random_resized_crop is None:  # the size kept is the resize's: at least resize_size a side
                opened.draft(self.mode, (self.resize_size, self.resize_size))
            image = eight_bit(ImageOps.exif_transpose(opened))  # a 16-bit PNG at its depth
            return image.convert(self.mode)

    def from_image(self, image: Image.Image) -> Tensor:
        """An image already decoded (pixels given in memory), as a file holding it would come out: converted to
        the model's mode (a gray image's one channel repeated for RGB, Pillow's ``convert``), resized, cropped."""
        return self.to_tensor(self.prepare(eight_bit(image).convert(self.mode)))

    def prepare(self, image: Image.Image) -> Image.Image:
        size, resample = (self.image_size, self.image_size), RESAMPLING[self.interpolation]
        if self.random_resized_crop is not None:
            image = image.resize(size, resample, box=random_crop_box(image.size, self.random_resized_crop))
        else:
            image = center_crop(resize_shorter(image, self.resize_size, resample), self.image_size)
        if self.horizontal_flip and torch.rand(()) < 0.5:
            image = image.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
        return image

    def to_tensor(self, image: Image.Image) -> Tensor:
        # In NumPy, one thread: torch's own ops on one image would start its thread pool, which in a process that
        # also trains (num_workers=0) contends with the model's threads (50x slower on a busy 2-core machine).
        pixels = np.asarray(image, dtype=np.float32)
        pixels = pixels[:, :, None] if pixels.ndim == 2 else pixels
        if self.normalize:  # (x / 255 - mean) / std as one multiply-add per pixel
            std = np.asarray(self.std, dtype=np.float32)
            pixels = pixels * (1.0 / (255.0 * std)) - np.asarray(self.mean, dtype=np.float32) / std
        else:
            pixels = pixels * np.float32(1.0 / 255.0)
        return torch.from_numpy(np.ascontiguousarray(pixels.transpose(2, 0, 1), dtype=np.float32))


def resize_shorter(image: Image.Image, side: int, resample: Image.Resampling) -> Image.Image:
    """``image`` with its shorter side ``side`` (torchvision's ``Resize(int)``: the longer one truncated)."""
    width, height = image.size
    if min(width, height) == side:
        return image
    if width <= height:
        return image.resize((side, int(side * height / width)), resample)
    return image.resize((int(side * width / height), side), resample)


def center_crop(image: Image.Image, side: int) -> Image.Image:
    width, height = image.size
    top, left = int(round((height - side) / 2.0)), int(round((width - side) / 2.0))
    return image.crop((left, top, left + side, top + side))


def random_crop_box(size: tuple[int, int], scale: Sequence[float]) -> tuple[int, int, int, int]:
    """(left, top, right, bottom) of a random crop, as torchvision's ``RandomResizedCrop.get_params`` draws it."""
    width, height = size
    area = width * height
    log_ratio = (math.log(ASPECT[0]), math.log(ASPECT[1]))
    for _ in range(10):
        target = area * torch.empty(()).uniform_(scale[0], scale[1]).item()
        aspect = math.exp(torch.empty(()).uniform_(*log_ratio).item())
        w, h = int(round(math.sqrt(target * aspect))), int(round(math.sqrt(target / aspect)))
        if 0 < w <= width and 0 < h <= height:
            top = int(torch.randint(0, height - h + 1, ()).item())
            left = int(torch.randint(0, width - w + 1, ()).item())
            return (left, top, left + w, top + h)
    ratio = width / height  # ten misses: the whole image, cut to the aspect range, centered
    w, h = (width, int(round(width / ASPECT[0]))) if ratio < ASPECT[0] else (
        (int(round(height * ASPECT[1])), height) if ratio > ASPECT[1] else (width, height))
    top, left = (height - h) // 2, (width - w) // 2
    return (left, top, left + w, top + h)


class ImageFiles(Dataset):
    """``(image float32 [C, S, S], label)`` of each item, decoded by ``pipeline`` (in a DataLoader worker).

    A file that fails to decode (cut short after its header was read) is named in a warning once and replaced by
    the next readable one, so that one bad file does not stop a run of hours.
    """

    def __init__(self, items: Sequence[Item], pipeline: ImagePipeline) -> None:
        self.items, self.pipeline = list(items), pipeline
        self._failed: set[str] = set()

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int) -> tuple[Tensor, int]:
        for step in range(len(self.items)):
            path, label = self.items[(index + step) % len(self.items)]
            try:
                return self.pipeline(path), label
            except DECODE_ERRORS as exc:
                if path not in self._failed:
                    self._failed.add(path)
                    log.warning("data.root: %s cannot be decoded (%s): skipped", path, exc)
        raise DataError(f"data.root: none of the {len(self.items):,} images could be decoded")


def eval_pipeline(data_cfg: Mapping[str, Any]) -> ImagePipeline:
    """The validation transform of a run's ``data=image_folder`` config (its stored config: mean/std resolved)."""
    from modelforge.data.options import ImageFolderOptions

    options = ImageFolderOptions(**{k: v for k, v in data_cfg.items() if k not in ("name", "classes")})
    return ImagePipeline(options.image_size, options.resize_size, options.interpolation, options.mean, options.std,
                         options.normalize, options.grayscale)


def image_folder_metadata(data_cfg: Mapping[str, Any]) -> dict[str, Any]:
    """What a deployed model of a ``data=image_folder`` run carries: class names, normalization, the transform."""
    pipeline = eval_pipeline(data_cfg)
    n_classes = data_cfg.get("n_classes")
    classes = [str(c) for c in data_cfg.get("classes") or []]
    classes += [str(k) for k in range(len(classes), int(n_classes or len(classes)))]
    return {"class_names": classes,
            "normalize": {"mean": list(pipeline.mean), "std": list(pipeline.std)} if pipeline.normalize else None,
            "preprocess": {"name": "image_folder", "image_size": pipeline.image_size,
                           "resize_size": pipeline.resize_size, "interpolation": pipeline.interpolation,
                           "grayscale": pipeline.grayscale}}


def metadata_pipeline(preprocess: Mapping[str, Any], normalize: Mapping[str, Any] | None) -> ImagePipeline:
    """The validation transform a deployed model's metadata describes (``preprocess``, ``normalize``)."""
    return ImagePipeline(int(preprocess["image_size"]), int(preprocess["resize_size"]),
                         str(preprocess.get("interpolation", "bilinear")),
                         tuple(normalize["mean"]) if normalize else IMAGENET_MEAN,
                         tuple(normalize["std"]) if normalize else IMAGENET_STD,
                         normalize is not None, bool(preprocess.get("grayscale")))


def image_batch(paths: Sequence[str], preprocess: Mapping[str, Any], normalize: Mapping[str, Any] | None) -> Tensor:
    """The images ``paths`` as a run's validation saw them (``preprocess``: the metadata's): float32 [N, C, S, S]."""
    pipeline = metadata_pipeline(preprocess, normalize)
    return torch.stack([pipeline(path) for path in paths])

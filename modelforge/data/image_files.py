"""Finding the images of ``data=image_folder``: class folders (torchvision's ImageFolder layout), the splits, and the
files that are left out. No pixels are decoded here; each image's header is read, so that a file that is no image
is named and skipped before any training.

Two layouts: ``ROOT/<class>/**/<image>``, split here (seeded, stratified: each class in the same proportions, at
least one image of each class held out, at least one left to train on), or
``ROOT/train/<class>/...`` with ``val/`` and ``test/`` beside it (either may be missing: then held out of ``train``).
"""

from __future__ import annotations

import logging
import stat
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch
from PIL import Image, UnidentifiedImageError

from modelforge.errors import ConfigError, DataError

log = logging.getLogger(__name__)

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff", ".webp")
SPLIT_FOLDERS = ("train", "val", "test")
LISTED = 10  # skipped files named in the log; the rest are counted
# An image with more pixels is refused (predict's max_pixels=) or skipped (training): decoding one takes up to 4
# bytes a pixel (color), 1 (gray).
MAX_PIXELS = 120_000_000

Item = tuple[str, int]  # an image file and its label


@dataclass
class ImageFolderIndex:
    """The classes (label order) and the images of each split; ``skipped``: "FILE: why" for each file left out."""

    root: Path
    classes: tuple[str, ...]
    splits: dict[str, list[Item]] = field(default_factory=dict)
    given: tuple[str, ...] = ()  # the split folders found (train, val, test), or () for one folder of classes
    skipped: list[str] = field(default_factory=list)

    def sizes(self) -> dict[str, int]:
        return {split: len(items) for split, items in self.splits.items()}

    def describe(self) -> str:
        where = f"folders {', '.join(f'{s}/' for s in self.given)}" if self.given else "one folder of classes"
        test = "" if "test" in self.splits else "; the test runs on the validation images (no test/, test_size 0)"
        return (f"data: {len(self.classes)} classes in {self.root} ({where}): "
                + ", ".join(f"{n:,} {s}" for s, n in self.sizes().items()) + test
                + (f"; {_count(len(self.skipped), 'file')} skipped" if self.skipped else ""))


def index_image_folder(root: Path, classes: Sequence[str] | None, val_size: float, test_size: float,
                       seed: int) -> ImageFolderIndex:
    """Every image under ``root`` by split, with its label (the index of its class folder in ``classes``).

    Raises:
        DataError: no such folder, no class folders, or a class folder without one readable image (named).
        ConfigError: ``classes`` that name a folder that is not there, or miss one that is.
    """
    if not root.is_dir():
        raise DataError(f"data.root: no folder {root}" if not root.exists() else f"data.root: {root} is a file, "
                        "not a folder of class folders")
    given = tuple(s for s in SPLIT_FOLDERS if (root / s).is_dir())
    layout = "train" in given and set(_subfolders(root)) <= set(SPLIT_FOLDERS)
    given = given if layout else ()
    found = _subfolders(root / "train" if layout else root)
    if not found:
        raise DataError(f"data.root: {root / 'train' if layout else root} holds no class folders: expected one "
                        "folder of images per class (ROOT/cat/1.jpg, ROOT/dog/2.jpg), or train/ and val/ folders of them")
    chosen = _check_classes(classes, found, root)
    if len(chosen) < 2:  # one class: every prediction right, a test/acc of 1.0 that says nothing
        raise DataError(f"data.root: {root / 'train' if layout else root} holds one class folder ({chosen[0]}): a "
                        "classifier needs two classes at least")
    for split in given[1:]:  # val/ or test/ with a class train/ lacks: its images would be dropped
        if extra := [name for name in _subfolders(root / split) if name not in chosen]:
            raise DataError(f"data.root: {root / split} has class folder{'s' if len(extra) > 1 else ''} that "
                            f"train/ lacks ({', '.join(extra)}): a model learns only train/'s classes; add them to "
                            "train/ or remove them")
    index = ImageFolderIndex(root, chosen, given=given)
    folders = {split: root / split for split in given} if given else {"train": root}
    read = {split: _read_split(folder, chosen, index.skipped, must_fill=split == "train")
            for split, folder in folders.items()}
    generator = torch.Generator().manual_seed(int(seed))
    held: dict[str, list[Item]] = {"val": [], "test": []}
    wanted = {"val": 0.0 if "val" in read else val_size, "test": 0.0 if "test" in read else test_size}
    train: list[Item] = []
    for label, items in enumerate(_by_class(read["train"], len(chosen))):
        order = torch.randperm(len(items), generator=generator).tolist()
        # At least one image of each class held out where asked (and one left to train on).
        n_val, n_test = (max(round(wanted[s] * len(items)), 1 if wanted[s] > 0 else 0) for s in ("val", "test"))
        n_val, n_test = min(n_val, max(len(items) - 1, 0)), min(n_test, max(len(items) - 1 - n_val, 0))
        picked = [items[i] for i in order]
        held["val"] += picked[:n_val]
        held["test"] += picked[n_val:n_val + n_test]
        train += sorted(picked[n_val + n_test:])
    index.splits["train"] = train
    index.splits["val"] = read.get("val", sorted(held["val"]))
    if "test" in read or test_size > 0:
        index.splits["test"] = read.get("test", sorted(held["test"]))
    for split, fraction in (("val", val_size), ("test", test_size)):
        if split in index.splits and not index.splits[split]:
            raise ConfigError(f"data.{split}_size", f"{fraction} of each class holds out no image of the "
                              f"{len(train):,} in {root}: too few images per class", allowed="a larger fraction, "
                              f"or a {split}/ folder beside train/")
    if index.skipped:
        more = f"\n  ... and {len(index.skipped) - LISTED:,} more" if len(index.skipped) > LISTED else ""
        log.warning("data.root: %s skipped, not an image Pillow can read:\n%s%s", _count(len(index.skipped), "file"),
                    "\n".join(f"  {s}" for s in index.skipped[:LISTED]), more)
    return index


def _count(n: int, noun: str) -> str:
    return f"{n:,} {noun}{'' if n == 1 else 's'}"


def _subfolders(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.is_dir() and not p.name.startswith("."))


def _check_classes(classes: Sequence[str] | None, found: list[str], root: Path) -> tuple[str, ...]:
    if classes is None:
        return tuple(found)
    missing = [c for c in classes if c not in found]
    extra = [c for c in found if c not in classes]
    if missing or extra:
        problem = "; ".join(p for p in (f"no folder for {missing}" if missing else "",
                                        f"folders not among them: {extra}" if extra else "") if p)
        raise ConfigError("data.classes", f"{list(classes)} do not match the class folders of {root}: {problem}",
                          hint="data.classes=null takes every folder (a run records its list in config.yaml)")
    return tuple(classes)


def _read_split(folder: Path, classes: tuple[str, ...], skipped: list[str], must_fill: bool) -> list[Item]:
    """The images of the class folders of ``folder`` (recursively), each header read; ``skipped`` gets the rest."""
    items: list[Item] = []
    for label, name in enumerate(classes):
        class_dir = folder / name
        if not class_dir.is_dir():
            if must_fill:
                raise DataError(f"data.root: no class folder {class_dir}")
            continue
        files = sorted(p for p in class_dir.rglob("*") if not p.name.startswith(".") and not _real_folder(p))
        kept = 0
        for path in files:
            if (why := _not_a_file(path) or _not_an_image(path)) is not None:
                skipped.append(f"{path}: {why}")
                continue
            items.append((str(path), label))
            kept += 1
        if kept == 0 and must_fill:
            other = f" ({len(files)} other files: {', '.join(p.name for p in files[:3])})" if files else ""
            raise DataError(f"data.root: class folder {class_dir} holds no images{other}: remove it, or add its "
                            f"images ({', '.join(IMAGE_SUFFIXES)})")
    return items


def _real_folder(path: Path) -> bool:
    return path.is_dir() and not path.is_symlink()


def _not_a_file(path: Path) -> str | None:
    """Why what stands in a class folder is no file to read (said, not dropped): a link to a folder (not followed:
    a loop of links would never end), to a device or FIFO, or to nothing."""
    if path.is_symlink() and path.is_dir():
        return "a link to a folder, not followed (put the images themselves in the class folder)"
    try:
        mode = path.stat().st_mode
    except OSError as exc:
        return f"a link that leads nowhere ({exc.strerror})"
    return None if stat.S_ISREG(mode) else "not a regular file (a device, a FIFO, a socket)"


def _not_an_image(path: Path) -> str | None:
    if path.suffix.lower() not in IMAGE_SUFFIXES:
        return f"not an image file ({path.suffix or 'no suffix'})"
    try:
        if path.stat().st_size == 0:
            return "empty (0 bytes)"
        with warnings.catch_warnings():  # Pillow's DecompressionBombWarning: the cap below says it for us
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            with Image.open(path) as image:  # the header only: no pixels are decoded
                width, height = image.size
    except (UnidentifiedImageError, Image.DecompressionBombError, OSError, ValueError, SyntaxError) as exc:
        return f"not an image Pillow can read ({exc})"
    if width * height > MAX_PIXELS:
        return (f"{width:,}x{height:,} pixels ({width * height / 1e6:,.1f} megapixels), more than predict's "
                f"max_pixels={MAX_PIXELS:,}: shrink it")
    return None


def _by_class(items: list[Item], n_classes: int) -> list[list[Item]]:
    grouped: list[list[Item]] = [[] for _ in range(n_classes)]
    for item in items:
        grouped[item[1]].append(item)
    return grouped

"""An image folder made of Fashion-MNIST: PNG files in train/, val/ and test/ folders of one folder per class.

The layout a user's own pictures have (torchvision's ImageFolder layout), from the IDX files of Debian's
``dataset-fashion-mnist`` package (``apt-get install dataset-fashion-mnist``). ``--per-class`` training and
``--val-per-class`` validation images of each class come from Fashion-MNIST's training set (its first images of
each class, in file order), ``--test-per-class`` from its test set.

    python experiments/finetune_image_folder/make_folder.py --out fashion_pngs
"""

from __future__ import annotations

import argparse
from pathlib import Path

from PIL import Image

from modelforge.data.idx import FASHION_MNIST, IMAGES_MAGIC, LABELS_MAGIC, parse_idx, read_idx_bytes

FILES = {"train": ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"),
         "test": ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz")}


def folder_name(label: int) -> str:
    return FASHION_MNIST.classes[label].replace("/", "_").replace(" ", "_")  # "T-shirt/top" -> "T-shirt_top"


def write_split(images, labels, out: Path, counts: dict[str, int]) -> dict[str, int]:
    """The first images of each class, ``counts[split]`` per class for each split in turn; PNG files by index."""
    taken = {label: 0 for label in range(len(FASHION_MNIST.classes))}
    written = dict.fromkeys(counts, 0)
    bounds = list(counts.items())
    for index, (image, label) in enumerate(zip(images, labels.tolist())):
        n, start = taken[label], 0
        for split, count in bounds:
            if n < start + count:
                folder = out / split / folder_name(label)
                folder.mkdir(parents=True, exist_ok=True)
                Image.fromarray(image.numpy(), "L").save(folder / f"{index:05d}.png")
                written[split] += 1
                break
            start += count
        taken[label] += 1
    return written


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fashion-dir", type=Path, default=Path("/usr/share/datasets/fashion-mnist"))
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--per-class", type=int, default=300)
    parser.add_argument("--val-per-class", type=int, default=50)
    parser.add_argument("--test-per-class", type=int, default=100)
    args = parser.parse_args()
    read = {split: (parse_idx(read_idx_bytes(args.fashion_dir / images), magic=IMAGES_MAGIC),
                    parse_idx(read_idx_bytes(args.fashion_dir / labels), magic=LABELS_MAGIC))
            for split, (images, labels) in FILES.items()}
    written = write_split(*read["train"], args.out, {"train": args.per_class, "val": args.val_per_class})
    written.update(write_split(*read["test"], args.out, {"test": args.test_per_class}))
    print(f"{args.out}: " + ", ".join(f"{n:,} {split}" for split, n in written.items())
          + f" PNG images of {len(FASHION_MNIST.classes)} classes")


if __name__ == "__main__":
    main()

"""Small real image folders for the tests: PNG files in class folders, written with Pillow."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image


def write_image_folder(root: Path, n_classes: int = 3, per_class: int = 6, size: tuple[int, int] = (40, 32),
                       seed: int = 0, mode: str = "RGB") -> list[str]:
    """``root/class_k/img_i.png``: each class a colour of its own plus noise (learnable in a few steps); returns the
    class names (sorted, as a folder's are)."""
    rng = np.random.default_rng(seed)
    names = [f"class_{chr(ord('a') + k)}" for k in range(n_classes)]
    for k, name in enumerate(names):
        folder = root / name
        folder.mkdir(parents=True, exist_ok=True)
        colour = np.array([(k * 85) % 256, (k * 170 + 60) % 256, (255 - k * 40) % 256], dtype=np.float64)
        for i in range(per_class):
            pixels = np.clip(colour + rng.normal(0, 25, (size[1], size[0], 3)), 0, 255).astype(np.uint8)
            image = Image.fromarray(pixels, "RGB")
            (image.convert(mode) if mode != "RGB" else image).save(folder / f"img_{i}.png")
    return names

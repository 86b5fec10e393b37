"""16-bit gray PNGs (written with Pillow) are read at their depth, by predict and by a data=image_folder run alike:
each comes out as its 8-bit twin (the same picture at 8 bits), where Pillow's convert made every nonzero pixel white."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from modelforge.data.image_transforms import ImagePipeline
from modelforge.deploy.images import read_image
from tests.conftest import run_cli


def twins(folder: Path, size: int = 28) -> tuple[Path, Path]:
    """A digit-like 8-bit PNG and the same picture in 16 bits (each value times 257: 255 -> 65535)."""
    pixels = np.zeros((size, size), dtype=np.uint8)
    top, bottom, left, right = size // 4, size - size // 4, size // 3, size - size // 3
    pixels[top:bottom, left:right] = np.linspace(40, 255, right - left).astype(np.uint8)  # a bar, dark to white
    eight, sixteen = folder / "eight.png", folder / "sixteen.png"
    Image.fromarray(pixels, "L").save(eight)
    Image.fromarray(pixels.astype(np.uint16) * 257).save(sixteen)
    assert Image.open(sixteen).mode == "I;16"
    return eight, sixteen


@pytest.mark.parametrize("size", [28, 300])  # 300: shrunk as it is decoded (mode I, no depth of its own)
def test_predict_reads_a_16_bit_png_as_its_8_bit_twin(tmp_path: Path, size: int) -> None:
    eight, sixteen = twins(tmp_path, size)
    assert read_image(sixteen).equal(read_image(eight))
    assert int((read_image(sixteen) == 255).sum()) == int((read_image(eight) == 255).sum())


@pytest.mark.parametrize("grayscale", [True, False])
def test_an_image_folder_run_reads_a_16_bit_png_as_its_8_bit_twin(tmp_path: Path, grayscale: bool) -> None:
    eight, sixteen = twins(tmp_path)
    pipeline = ImagePipeline(image_size=28, resize_size=28, grayscale=grayscale)
    assert pipeline(str(sixteen)).equal(pipeline(str(eight)))
    assert pipeline.from_image(Image.open(sixteen)).equal(pipeline(str(eight)))


def test_the_predict_command_gives_a_16_bit_png_its_twins_probabilities(small_run: Path, tmp_path: Path) -> None:
    eight, sixteen = twins(tmp_path)
    outputs = []
    for image in (eight, sixteen):
        csv = tmp_path / f"{image.stem}.csv"
        result = run_cli("predict", f"ckpt_path={small_run}", f"inputs={image}", f"output={csv}", "invert=false")
        assert result.returncode == 0, result.stderr
        outputs.append(csv.read_text().splitlines()[1].split(",", 1)[1])  # after the input's name
    assert outputs[0] == outputs[1]

"""A torchvision-format weights file for resnet18: ``torch.save(torchvision.models.resnet18().state_dict())``.

This machine has no internet, so torchvision's ImageNet weights (``init.from=torchvision:resnet18``, which fetches
https://download.pytorch.org/models/resnet18-f37072fd.pth) cannot be had: this file has torchvision's names, order
and shapes, but its weights are torchvision's random init (seed 0). It shows the mechanics (the pairing, the new
head, freezing), not what ImageNet features are worth. torchvision is needed for this script only: where it is not
installed, ``pip install --no-deps --target .venv/torchvision-tests torchvision==0.28.0`` (README, The model zoo).

    python experiments/finetune_image_folder/make_weights.py --out resnet18-random.pth
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from tests.helpers.parity import import_torchvision_models  # finds torchvision beside the venv

    torch.manual_seed(0)
    model = import_torchvision_models().resnet18()
    torch.save(model.state_dict(), args.out)
    print(f"{args.out}: torchvision's resnet18, random init (seed 0), {len(model.state_dict())} tensors")


if __name__ == "__main__":
    main()

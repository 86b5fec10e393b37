"""Build time: the model language against torchvision's own constructors, at 224x224 and 512x512.

Five models, each built three ways in one process, interleaved by ``run.py --only build``:

- torchvision 0.28's constructor, ``torchvision.models.NAME()`` (weights=None, 1000 classes, its own init;
  ViT-B/16 at 512x512: ``vit_b_16(image_size=512)``, whose position embedding has a row per patch);
- ``build_model`` of the config ``create_model`` composes for it (a fresh copy each time);
- ``create_model(NAME, ["in_channels=3", "n_classes=1000", "input_size=[S,S]"])``: Hydra's compose, then the build.

The models: resnet50, vit_b_16, convnext_tiny and mobilenet_v3_small from conf/model/, and densenet121, a deep
concatenation graph written in YAML for this benchmark (configs/model/densenet121.yaml: 58 dense layers, each
reading every earlier output of its block). Before any timing each built model is checked against
torchvision's: the same parameter count, and at 224x224 the same outputs once torchvision's weights are
copied in (tests/models/test_torchvision_parity.py's pairing), compared on 2x3x64x64 (ViT: 224x224).

A graph's build runs each block on an empty batch (shapes without arithmetic), so its time should not depend on
the input size: the table gives build_model at 512 over build_model at 224.
"""

from __future__ import annotations

import copy
import gc
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

REPO = Path(__file__).resolve().parents[2]
CONFIGS = Path(__file__).resolve().parent / "configs"  # densenet121.yaml and its blocks
MODELS = ("resnet50", "vit_b_16", "convnext_tiny", "mobilenet_v3_small", "densenet121")
SIDES = (224, 512)
TORCHVISION, BUILD, CREATE = "torchvision's constructor", "build_model (composed config)", "create_model (compose + build)"


def overrides(side: int) -> list[str]:
    return ["in_channels=3", "n_classes=1000", f"input_size=[{side},{side}]"]


def config_dir(name: str) -> Path | None:
    """Where the model file is, when not in conf/model/."""
    return CONFIGS if name == "densenet121" else None


def torchvision_models() -> Any:
    """``torchvision.models``, imported as the parity test imports it (past a CUDA-built extension)."""
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    from tests.models.test_torchvision_parity import tv_models

    return tv_models


def torchvision_model(name: str, side: int) -> nn.Module:
    """torchvision's constructor (ViT takes the image size: its position embedding holds a row per patch)."""
    make = getattr(torchvision_models(), name)
    return make(image_size=side) if name == "vit_b_16" else make()


def compose(name: str, side: int) -> dict[str, Any]:
    """The model config ``create_model(name, overrides(side))`` builds."""
    from modelforge.build import model_config_from_run
    from modelforge.config import conf_dir
    from modelforge.models.compose import compose_model

    folders = (conf_dir(), *([config_dir(name)] if config_dir(name) else []))
    return model_config_from_run(compose_model(name, overrides(side), folders))


def check(name: str, side: int, cfg: dict[str, Any], outputs: bool = True) -> dict[str, int]:
    """Built and torchvision's models hold the same parameters; at 224 (and ``outputs``), give the same outputs
    with torchvision's weights copied in (pairing them runs a forward on the meta device: seconds)."""
    import modelforge
    from tests.models.test_torchvision_parity import copy_torchvision_weights

    built, reference = modelforge.build_model(copy.deepcopy(cfg)), torchvision_model(name, side)
    counts = {n: sum(p.numel() for p in m.parameters()) for n, m in (("built", built), ("torchvision", reference))}
    assert len(set(counts.values())) == 1, f"{name} at {side}: parameter counts differ: {counts}"
    if side == 224 and outputs:
        x = torch.randn(2, 3, *((224, 224) if name == "vit_b_16" else (64, 64)))
        copy_torchvision_weights(reference, built, x)
        built.eval(), reference.eval()
        with torch.no_grad():
            assert torch.allclose(built(x), reference(x), atol=1e-5), f"{name} differs from torchvision's"
    leaves = sum(1 for m in built.modules() if next(m.children(), None) is None)
    return {"params": counts["built"], "leaf_modules": leaves}


def _timed(make: Callable[[], Any]) -> dict[str, float]:
    gc.collect()  # the last side's model is freed before the clock starts, not during it
    start = time.perf_counter()
    make()
    return {"s": time.perf_counter() - start}


def sides(name: str, side: int, cfg: dict[str, Any]) -> dict[str, Callable[[], dict[str, float]]]:
    """The three ways to make the model, each timed alone. build_model gets a fresh copy of the config each time
    (made before the clock starts): nothing of one build is reused by the next."""
    import modelforge

    def build() -> dict[str, float]:
        fresh = copy.deepcopy(cfg)
        return _timed(lambda: modelforge.build_model(fresh))

    return {TORCHVISION: lambda: _timed(lambda: torchvision_model(name, side)),
            BUILD: build,
            CREATE: lambda: _timed(lambda: modelforge.create_model(name, overrides(side), config_dir=config_dir(name)))}

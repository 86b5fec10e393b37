"""Build time: the model language against torchvision's own constructors, at 224x224 and 512x512.

Seven models, each built three ways in one process, interleaved by ``run.py --only build``:

- torchvision 0.28's constructor, ``torchvision.models.NAME()`` (weights=None, 1000 classes, its own init;
  ViT-B/16 at 512x512: ``vit_b_16(image_size=512)``, whose position embedding has a row per patch; MaxViT-T
  ``maxvit_t(input_size=(S, S))`` at 224x224 and 448x448: its windows must divide every stage's map, which 512's
  do not);
- ``build_model`` of the config ``compose_model_config`` gives for it (a fresh copy each time);
- ``create_model(NAME, ["in_channels=3", "n_classes=1000", "input_size=[S,S]"])``: Hydra's compose, then the
  build (every call composes).

The models: resnet50, vit_b_16, convnext_tiny, mobilenet_v3_small, swin_t and maxvit_t from conf/model/, and densenet121, a deep
concatenation graph written in YAML for this benchmark (configs/model/densenet121.yaml: 58 dense layers, each
reading every earlier output of its block). Before any timing each built model is checked against
torchvision's: the same parameter count, and at 224x224 the same outputs once torchvision's weights are
copied in (loaded as ``init.from`` loads them: paired by structure), compared on
2x3x64x64 (ViT and MaxViT, whose sizes are fixed when built: 224x224). The benchmark imports nothing from tests/: it runs against an installed modelforge.

A graph's build runs each block on an empty batch (shapes without arithmetic), so its time should not depend on
the input size: the table gives build_model at 512 over build_model at 224.
"""

from __future__ import annotations

import copy
import gc
import importlib.util
import sys
import time
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

CONFIGS = Path(__file__).resolve().parent / "configs"  # densenet121.yaml and its blocks
MODELS = ("resnet50", "vit_b_16", "convnext_tiny", "mobilenet_v3_small", "swin_t", "maxvit_t", "densenet121")
SIDES = (224, 512)
FIXED_SIZE = ("vit_b_16", "maxvit_t")  # built for one input size: compared at 224x224
TORCHVISION, BUILD = "torchvision's constructor", "build_model (composed config)"
CREATE = "create_model (Hydra composes, then builds)"
# where `pip install --no-deps --target` puts torchvision beside a CPU-only environment (docs/zoo.md)
TORCHVISION_BESIDE = Path(sys.prefix) / "torchvision-tests"


def model_sides(name: str) -> tuple[int, int]:
    """The two input sides a model is timed at: 224 and 512, or 448 for MaxViT (7x7 windows of a 512 image's maps
    at stride 32 would not divide 16)."""
    return (224, 448) if name == "maxvit_t" else SIDES


def overrides(side: int) -> list[str]:
    return ["in_channels=3", "n_classes=1000", f"input_size=[{side},{side}]"]


def config_dir(name: str) -> Path | None:
    """Where the model file is, when not in conf/model/."""
    return CONFIGS if name == "densenet121" else None


def torchvision_models() -> types.ModuleType:
    """``torchvision.models``, from the environment or from ``TORCHVISION_BESIDE``. Its PyPI wheel links CUDA builds
    of torch's libraries: beside a CPU-only torch its one module that registers meta kernels for its C++ operators
    fails to load, and is replaced by an empty one (the model definitions use none of them)."""
    if importlib.util.find_spec("torchvision") is None and TORCHVISION_BESIDE.is_dir():
        sys.path.append(str(TORCHVISION_BESIDE))
    try:
        import torchvision.models as models
    except ImportError:
        raise SystemExit(f"the build section needs torchvision 0.28: pip install --no-deps --target "
                         f"{TORCHVISION_BESIDE} torchvision==0.28.0") from None
    except RuntimeError as exc:
        if "torchvision::" not in str(exc):
            raise
        for name in [m for m in sys.modules if m == "torchvision" or m.startswith("torchvision.")]:
            del sys.modules[name]
        sys.modules["torchvision._meta_registrations"] = types.ModuleType("torchvision._meta_registrations")
        import torchvision.models as models
    return models


def torchvision_model(name: str, side: int) -> nn.Module:
    """torchvision's constructor (ViT takes the image size: its position embedding holds a row per patch)."""
    make = getattr(torchvision_models(), name)
    return make(image_size=side) if name == "vit_b_16" else make(input_size=(side, side)) if name == "maxvit_t" \
        else make()


def compose(name: str, side: int) -> dict[str, Any]:
    """The model config ``create_model(name, overrides(side))`` builds."""
    import modelforge

    return modelforge.compose_model_config(name, overrides(side), config_dir=config_dir(name))


def check(name: str, side: int, cfg: dict[str, Any], outputs: bool = True) -> dict[str, int]:
    """Built and torchvision's models hold the same parameters; at 224 (and ``outputs``), give the same outputs
    with torchvision's weights copied in (pairing them runs a forward on the meta device: seconds)."""
    import modelforge

    built, reference = modelforge.build_model(copy.deepcopy(cfg)), torchvision_model(name, side)
    counts = {n: sum(p.numel() for p in m.parameters()) for n, m in (("built", built), ("torchvision", reference))}
    assert len(set(counts.values())) == 1, f"{name} at {side}: parameter counts differ: {counts}"
    if side == 224 and outputs:
        x = torch.randn(2, 3, *((224, 224) if name in FIXED_SIZE else (64, 64)))
        _load_through_init_from(reference, built)
        built.eval(), reference.eval()
        with torch.no_grad():
            assert torch.allclose(built(x), reference(x), atol=1e-5), f"{name} differs from torchvision's"
    leaves = sum(1 for m in built.modules() if next(m.children(), None) is None)
    return {"params": counts["built"], "leaf_modules": leaves}


def _load_through_init_from(reference: nn.Module, built: nn.Module) -> None:
    """torchvision's state_dict saved and loaded with ``init.from`` (paired by structure, constants checked)."""
    import tempfile

    from modelforge.train.transfer import load_init_weights

    with tempfile.TemporaryDirectory() as folder:
        torch.save(reference.state_dict(), Path(folder) / "weights.pth")
        load_init_weights(built, Path(folder) / "weights.pth", strict=True)


def _timed(make: Callable[[], Any], prepare: Callable[[], Any] = lambda: None, calls: int = 1) -> dict[str, float]:
    """The fastest of ``calls`` timed calls of ``make`` (``prepare`` runs before each, off the clock), as
    ``timeit`` advises: a 30 ms constructor timed once swings by a third with what else the machine does, and
    what slows a call down is the machine, not the code."""
    times = []
    for _ in range(calls):
        made = prepare()
        gc.collect()  # the last side's model is freed before the clock starts, not during it
        start = time.perf_counter()
        make() if made is None else make(made)
        times.append(time.perf_counter() - start)
    return {"s": min(times)}


def calls_for(seconds: float, budget: float = 0.4, most: int = 10) -> int:
    """How many calls a round times of a side that takes ``seconds``: about ``budget`` seconds of them, 1 to ``most``."""
    return max(1, min(most, round(budget / max(seconds, 1e-3))))


def sides(name: str, side: int, cfg: dict[str, Any], calls: int = 1) -> dict[str, Callable[[], dict[str, float]]]:
    """The three ways to make the model, each timed alone, ``calls`` times a round. build_model gets a fresh copy
    of the config each time (made before the clock starts): nothing of one build is reused by the next."""
    import modelforge

    def create() -> Any:
        return modelforge.create_model(name, overrides(side), config_dir=config_dir(name))

    return {TORCHVISION: lambda: _timed(lambda: torchvision_model(name, side), calls=calls),
            BUILD: lambda: _timed(modelforge.build_model, lambda: copy.deepcopy(cfg), calls),
            CREATE: lambda: _timed(create, calls=calls)}

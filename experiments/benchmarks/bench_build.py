"""Build time per node: the model language against the same network constructed in plain ``torch.nn``.

Two models, each side timed in one process, interleaved by ``run.py --only build``:

- YOLOv8-cls at scale x (3 input channels, 1000 classes, 224x224; 57,422,840 parameters):
  ``modelforge.create_model("yolov8_cls", [...])`` (Hydra composes the model config, then
  ``build_model``), its two steps timed apart (the compose alone, ``build_model`` of the composed
  dict), vs :func:`yolov8_cls_x`, ultralytics' Conv / Bottleneck / C2f / Classify in plain
  ``torch.nn`` (the parity test's reference), checked to hold the same parameters and give the
  same outputs as the build.
- A chain of N ``nn.Linear(16, 16)`` graph nodes after a flatten node (the first Linear takes 64),
  ``build_model`` of a ``graph`` config vs ``nn.Sequential`` of the same layers, N = 250, 500, 1000.
- ViT-B/16 and ConvNeXt-T at 3x224x224 and 1000 classes (``conf/model/vit_b_16.yaml``,
  ``convnext_tiny.yaml``): ``build_model`` of the composed config vs torchvision's own constructor
  (``torchvision.models.VisionTransformer`` / ``ConvNeXt``, what ``vit_b_16()`` / ``convnext_tiny()``
  call, with its init), checked at their own depth to hold the same parameters and give the same
  outputs (tests/models/test_torchvision_parity.py's weight copy), at their own depth and at twice it
  (24 encoder layers; 18 blocks in ConvNeXt's third stage): time per graph node stays flat when
  building is linear in nodes.

modelforge builds a graph node by node, running a batch of two zeros through each node as it is
built (the dry run that infers widths); plain construction does not, so each model has a third
side: the plain construction plus one forward of a batch of two zeros, as the dry run does it
(``eval()``, ``torch.no_grad()``). Every side keeps PyTorch's default init (the configs set none).
"""

from __future__ import annotations

import gc
import math
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

REPO = Path(__file__).resolve().parents[2]
YOLO_NAME = "yolov8_cls"
YOLO_OVERRIDES = ["scale=x", "in_channels=3", "n_classes=1000", "input_size=[224,224]"]
YOLO_PARAMS = 57_422_840
CHAIN_WIDTH, CHAIN_INPUT = 16, (1, 8, 8)

PLAIN, PLAIN_FORWARD = "plain torch.nn", "plain torch.nn + one forward (2 zeros)"
BUILD = "modelforge build_model (composed config)"
CREATE = "modelforge create_model (compose + build)"
COMPOSE = "Hydra compose only (create_model's first step)"
CHAIN_BUILD = "modelforge build_model"


def yolov8_cls_x(in_channels: int = 3, n_classes: int = 1000) -> nn.Sequential:
    """ultralytics' yolov8-cls.yaml at scale x, constructed directly in plain ``torch.nn``: the
    reference that tests/models/test_zoo.py pins the ``yolov8_cls`` model file against."""
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    from tests.models.test_zoo import yolov8_cls

    return yolov8_cls("x", in_channels, n_classes)


def leaf_modules(model: nn.Module) -> int:
    return sum(1 for m in model.modules() if next(m.children(), None) is None)


def graph_nodes(model: nn.Module) -> int:
    """Blocks the builder made and dry-ran: the children of graphs and repeats that are neither."""
    from modelforge.models.graph_build import Graph, Repeat

    return sum(1 for m in model.modules() if isinstance(m, (Graph, Repeat))
               for child in m.children() if not isinstance(child, (Graph, Repeat)))


def _forward_twos(model: nn.Module, shape: tuple[int, ...]) -> None:
    """One forward of a batch of two zeros, as modelforge's dry run runs each node."""
    with torch.no_grad():
        model.eval()(torch.zeros(2, *shape))
    model.train()


def _timed(make: Callable[[], Any]) -> dict[str, float]:
    gc.collect()  # the last side's model is freed before the clock starts, not during it
    start = time.perf_counter()
    make()
    return {"s": time.perf_counter() - start}


# ---------------------------------------------------------------- the YOLOv8-cls sides
def compose_yolo() -> dict[str, Any]:
    """The model config ``create_model`` composes (Hydra, ``conf/summary.yaml`` with ``model=yolov8_cls``)."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from modelforge import model_config_from_run
    from modelforge.config import conf_dir

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
        cfg = compose("summary", overrides=[f"model={YOLO_NAME}", *(f"model.{o}" for o in YOLO_OVERRIDES)])
    return model_config_from_run(cfg)


def check_yolo(cfg: dict[str, Any]) -> dict[str, int]:
    """Both builds hold 57,422,840 parameters of the same shapes and give the same outputs."""
    import modelforge

    created = modelforge.create_model(YOLO_NAME, YOLO_OVERRIDES)
    built, plain = modelforge.build_model(cfg), yolov8_cls_x()
    counts = {name: sum(p.numel() for p in m.parameters())
              for name, m in (("create_model", created), ("build_model", built), ("plain", plain))}
    assert set(counts.values()) == {YOLO_PARAMS}, f"parameter counts differ from {YOLO_PARAMS:,}: {counts}"
    source, target = built.state_dict(), plain.state_dict()
    assert [v.shape for v in source.values()] == [v.shape for v in target.values()], "the parameter shapes differ"
    plain.load_state_dict(dict(zip(target, source.values())))
    x = torch.randn(2, 3, 224, 224)
    built.eval(), plain.eval()
    with torch.no_grad():
        assert torch.allclose(built(x), plain(x), atol=1e-4), "plain YOLOv8-cls x differs from the built one"
    return {"params": YOLO_PARAMS, "leaf_modules": leaf_modules(built), "plain_leaf_modules": leaf_modules(plain),
            "graph_nodes": graph_nodes(built)}


def yolo_sides(cfg: dict[str, Any]) -> dict[str, Callable[[], dict[str, float]]]:
    import modelforge

    return {PLAIN: lambda: _timed(yolov8_cls_x),
            PLAIN_FORWARD: lambda: _timed(lambda: _forward_twos(yolov8_cls_x(), (3, 224, 224))),
            BUILD: lambda: _timed(lambda: modelforge.build_model(cfg)),
            CREATE: lambda: _timed(lambda: modelforge.create_model(YOLO_NAME, YOLO_OVERRIDES)),
            COMPOSE: lambda: _timed(compose_yolo)}


# ---------------------------------------------------------------- the chain sides
def chain_config(n: int) -> dict[str, Any]:
    """A ``graph`` config: a flatten node, then ``n`` ``nn.Linear`` nodes of 16 outputs."""
    nodes: dict[str, Any] = {"flat": {"block": "flatten"}}
    nodes.update({f"n{i}": {"block": "nn.Linear", "args": {"out_features": CHAIN_WIDTH}} for i in range(n)})
    return {"name": "graph", "in_channels": CHAIN_INPUT[0], "input_size": list(CHAIN_INPUT[1:]), "nodes": nodes}


def plain_chain(n: int) -> nn.Sequential:
    features = math.prod(CHAIN_INPUT)
    return nn.Sequential(nn.Flatten(), nn.Linear(features, CHAIN_WIDTH),
                         *(nn.Linear(CHAIN_WIDTH, CHAIN_WIDTH) for _ in range(n - 1)))


def check_chain(n: int) -> dict[str, int]:
    """Same parameters, same outputs; ``build_model`` leaves the config as it was."""
    import copy

    import modelforge

    cfg = chain_config(n)
    kept = copy.deepcopy(cfg)
    built, plain = modelforge.build_model(cfg), plain_chain(n)
    assert cfg == kept, "build_model changed its config: a fresh one per build is needed"
    source, target = built.state_dict(), plain.state_dict()
    assert [v.shape for v in source.values()] == [v.shape for v in target.values()], "the chains differ"
    plain.load_state_dict(dict(zip(target, source.values())))
    x = torch.randn(2, *CHAIN_INPUT)
    with torch.no_grad():
        assert torch.allclose(built(x), plain(x), atol=1e-5), "the plain chain differs from the built one"
    assert graph_nodes(built) == n + 1
    return {"graph_nodes": n + 1, "leaf_modules": leaf_modules(built), "plain_leaf_modules": leaf_modules(plain),
            "params": sum(p.numel() for p in built.parameters())}


def chain_sides(n: int) -> dict[str, Callable[[], dict[str, float]]]:
    import modelforge

    cfg = chain_config(n)
    return {PLAIN: lambda: _timed(lambda: plain_chain(n)),
            PLAIN_FORWARD: lambda: _timed(lambda: _forward_twos(plain_chain(n), CHAIN_INPUT)),
            CHAIN_BUILD: lambda: _timed(lambda: modelforge.build_model(cfg))}


# ---------------------------------------------------------------- the torchvision sides
TORCHVISION, TORCHVISION_FORWARD = "torchvision's constructor", "torchvision's constructor + one forward (2 zeros)"
IMAGENET = ["in_channels=3", "n_classes=1000", "input_size=[224,224]"]
IMAGE = (3, 224, 224)
# model file: (the config key its depth is, torchvision's depth, the depths timed)
DEPTHS = {"vit_b_16": ("params.depth", 12, (12, 24)), "convnext_tiny": ("nodes.stage3.repeat", 9, (9, 18))}


def torchvision_models() -> Any:
    """``torchvision.models``, imported as the parity test imports it (past a CUDA-built extension)."""
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    from tests.models.test_torchvision_parity import tv_models

    return tv_models


def torchvision_model(name: str, depth: int) -> nn.Module:
    """torchvision's ``vit_b_16()`` / ``convnext_tiny()`` (weights=None), with ``depth`` encoder layers /
    third-stage blocks: the arguments those functions pass to the class, but that one."""
    models = torchvision_models()
    if name == "vit_b_16":
        return models.VisionTransformer(image_size=224, patch_size=16, num_layers=depth, num_heads=12,
                                        hidden_dim=768, mlp_dim=3072)
    from torchvision.models.convnext import CNBlockConfig

    stages = [CNBlockConfig(96, 192, 3), CNBlockConfig(192, 384, 3), CNBlockConfig(384, 768, depth),
              CNBlockConfig(768, None, 3)]
    return models.ConvNeXt(stages, stochastic_depth_prob=0.1)


def compose_torchvision(name: str, depth: int) -> dict[str, Any]:
    """The model config ``create_model(name, IMAGENET + [depth])`` composes."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from modelforge import model_config_from_run
    from modelforge.config import conf_dir

    key = DEPTHS[name][0]
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
        cfg = compose("summary", overrides=[f"model={name}", *(f"model.{o}" for o in [*IMAGENET, f"{key}={depth}"])])
    return model_config_from_run(cfg)


def check_torchvision(name: str, cfg: dict[str, Any], depth: int) -> dict[str, int]:
    """Built and torchvision's: the same parameters, and the same outputs once torchvision's are copied in
    (at torchvision's own depth; at others, the same parameter count)."""
    import modelforge
    from tests.models.test_torchvision_parity import copy_torchvision_weights

    built, reference = modelforge.build_model(cfg), torchvision_model(name, depth)
    counts = {n: sum(p.numel() for p in m.parameters()) for n, m in (("built", built), ("torchvision", reference))}
    assert len(set(counts.values())) == 1, f"{name} at depth {depth}: parameter counts differ: {counts}"
    if depth == DEPTHS[name][1]:
        x = torch.randn(2, *IMAGE)
        copy_torchvision_weights(reference, built, x)
        built.eval(), reference.eval()
        with torch.no_grad():
            assert torch.allclose(built(x), reference(x), atol=1e-5), f"{name} differs from torchvision's"
    return {"params": counts["built"], "graph_nodes": graph_nodes(built), "leaf_modules": leaf_modules(built),
            "torchvision_leaf_modules": leaf_modules(reference)}


def torchvision_sides(name: str, cfg: dict[str, Any], depth: int) -> dict[str, Callable[[], dict[str, float]]]:
    import modelforge

    return {TORCHVISION: lambda: _timed(lambda: torchvision_model(name, depth)),
            TORCHVISION_FORWARD: lambda: _timed(lambda: _forward_twos(torchvision_model(name, depth), IMAGE)),
            BUILD: lambda: _timed(lambda: modelforge.build_model(cfg))}

"""init_once's DeferredFills against torch's own way (build on the meta device, ``to_empty()``, then
``reset_parameters()`` of each module that the init rules do not fill whole, then the rules): build_model of
conf/model's resnet50, vit_b_16, convnext_tiny and mobilenet_v3_small at 224x224, both ways in one process,
interleaved rounds, the fastest of each; and whether seed 0 gives the same weights. Torch's way is tried on every
block, and on the blocks init_once defers only (``DEFER_FROM``). Results: modelforge/layers/init_once.py.

    python experiments/benchmarks/init_once_vs_meta.py [ROUNDS] [MODEL ...]
"""

from __future__ import annotations

import copy
import gc
import sys
import time
from pathlib import Path
from typing import Any

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_build  # noqa: E402

import modelforge  # noqa: E402
from modelforge.models import graph_dry_run  # noqa: E402

DEFERRED = graph_dry_run.DryRun.make


def _filled_by_rules(module: nn.Module, init: Any) -> bool:
    """A conv or linear layer whose every tensor a rule fills: its defaults need not be drawn."""
    rules = dict(zip(init.__code__.co_freevars, (c.cell_contents for c in init.__closure__)))["rules"]
    if isinstance(module, nn.modules.conv._ConvNd):
        weight = rules["conv"]
    elif isinstance(module, nn.Linear):
        weight = rules["linear"]
    else:
        return False
    return weight is not None and (module.bias is None or rules["bias"] is not None)


def make_on_meta(self: graph_dry_run.DryRun, factory: Any, kwargs: dict[str, Any]) -> Any:
    if self.init is None:
        return factory(**kwargs)
    with torch.device("meta"):
        block = factory(**kwargs)
    if not isinstance(block, nn.Module):
        return block
    block.to_empty(device="cpu")  # values and buffers: whatever memory held
    for module in block.modules():
        if not [*module.parameters(recurse=False), *module.buffers(recurse=False)] or \
                _filled_by_rules(module, self.init):
            continue
        reset = getattr(module, "reset_parameters", None) or getattr(module, "_reset_parameters", None)
        if reset is None:
            raise RuntimeError(f"{type(module).__name__} has no reset_parameters: its values are lost on meta")
        reset()
    block.apply(self.init)
    return block


def make_on_meta_if_big(self: graph_dry_run.DryRun, factory: Any, kwargs: dict[str, Any]) -> Any:
    if self.init is None or graph_dry_run.size_guess(kwargs) < graph_dry_run.DEFER_FROM:
        return DEFERRED(self, factory, kwargs)
    return make_on_meta(self, factory, kwargs)


WAYS = {"init_once (DeferredFills)": DEFERRED, "meta, every block": make_on_meta,
        "meta, blocks init_once defers": make_on_meta_if_big}


def build(cfg: dict[str, Any], way: Any) -> nn.Module:
    graph_dry_run.DryRun.make = way
    try:
        return modelforge.build_model(copy.deepcopy(cfg))
    finally:
        graph_dry_run.DryRun.make = DEFERRED


def main(rounds: int, names: list[str]) -> None:
    for name in names:
        cfg = bench_build.compose(name, 224)
        states = {}
        for label, way in WAYS.items():
            torch.manual_seed(0)
            states[label] = build(cfg, way).state_dict()
        first = states[next(iter(WAYS))]
        for label, state in list(states.items())[1:]:
            differ = sum(not torch.equal(first[k], state[k]) for k in first)
            print(f"{name}: {label}: {differ}/{len(first)} tensors differ from init_once's with seed 0", flush=True)
        best = dict.fromkeys(WAYS, float("inf"))
        for _ in range(rounds):
            for label, way in WAYS.items():
                fresh = copy.deepcopy(cfg)
                gc.collect()
                graph_dry_run.DryRun.make = way
                start = time.perf_counter()
                modelforge.build_model(fresh)
                best[label] = min(best[label], time.perf_counter() - start)
                graph_dry_run.DryRun.make = DEFERRED
        print(f"{name}: " + ", ".join(f"{label} {s * 1000:.0f} ms" for label, s in best.items()), flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 5,
         sys.argv[2:] or ["resnet50", "vit_b_16", "convnext_tiny", "mobilenet_v3_small"])

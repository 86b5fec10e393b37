"""Plugins attached before ``model.compile()`` keep working in the compiled model (the trainer's order)."""

from __future__ import annotations

import copy

import pytest
import torch

from modelforge.hooks import build_hook_plugins
from tests.hooks.conftest import forward_backward, hook_count

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")  # dynamo's notes on graph breaks


def test_hooks_attached_before_compile_still_act(model, batch) -> None:
    torch._dynamo.reset()
    reference = copy.deepcopy(model)
    plugins = build_hook_plugins({"grad_clip": {"value": 0.05}, "grad_monitor": {},
                                  "feature_capture": {"layers": ["encoder.1"]}})
    handles = [p.attach(model) for p in plugins]
    model.compile(backend="aot_eager")  # dynamo traces the hooks; no C++ toolchain needed
    for _ in range(2):
        model.zero_grad()
        forward_backward(model, batch)
        reference.zero_grad()
        forward_backward(reference, batch)
    for p, q in zip(model.parameters(), reference.parameters()):
        assert torch.equal(p.grad, q.grad.clamp(-0.05, 0.05))
    assert set(plugins[1].norms) == {"encoder.0", "encoder.1", "encoder.3", "decoder.1"}
    with torch.no_grad():
        direct = reference.encoder[1](reference.encoder[0](batch))
    assert torch.allclose(plugins[2].features["encoder.1"], direct, atol=1e-6)
    for handle in handles:
        handle.remove()
    assert hook_count(model) == 0


def test_steering_plugins_attached_before_compile_steer_the_compiled_model(model, batch) -> None:
    torch._dynamo.reset()
    model.eval()
    reference = copy.deepcopy(model)
    options = {"ablate": {"layers": ["encoder.3"], "channels": [0, 2], "mode": "mean"},
               "input_noise": {"std": 0.3, "always": True}}
    handles = [p.attach(model) for p in build_hook_plugins(options)]
    ref_handles = [p.attach(reference) for p in build_hook_plugins(options)]
    model.compile(backend="aot_eager")
    with torch.no_grad():
        torch.manual_seed(5)
        compiled = model(batch)
        torch.manual_seed(5)
        eager = reference(batch)
        for handle in ref_handles:
            handle.remove()
        clean = reference(batch)
    assert torch.allclose(compiled, eager, atol=1e-5) and not torch.allclose(compiled, clean, atol=1e-3)
    for handle in handles:
        handle.remove()
    assert hook_count(model) == 0

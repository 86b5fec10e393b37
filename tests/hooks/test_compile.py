"""Plugins attached before ``model.compile()`` keep working in the compiled model (the trainer's order)."""

from __future__ import annotations

import copy

import pytest
import torch

from modelforge.hooks import build_hook_plugins
from tests.helpers.tiny_net import forward_backward, hook_count

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


def test_activation_stats_tensor_hooks_work_in_the_compiled_model(model, batch) -> None:
    torch._dynamo.reset()
    reference = copy.deepcopy(model)
    plugin = build_hook_plugins({"activation_stats": {"layers": ["encoder.4"], "log_every": 1}})[0]
    handle = plugin.attach(model)
    model.compile(backend="aot_eager")
    model(batch).pow(2).sum().backward()
    act = reference.encoder(batch)
    act.retain_grad()
    reference.decoder(act).pow(2).sum().backward()
    stats = plugin.stats["encoder.4"]
    assert stats["act_mean"] == pytest.approx(act.mean().item(), rel=1e-5)
    assert stats["grad_mean"] == pytest.approx(act.grad.mean().item(), rel=1e-4)
    handle.remove()


def test_grad_cam_full_backward_hook_works_in_the_compiled_model(model, batch) -> None:
    torch._dynamo.reset()
    reference = copy.deepcopy(model)
    plugin, eager = build_hook_plugins({"grad_cam": {}}), build_hook_plugins({"grad_cam": {}})
    handles = [plugin[0].attach(model), eager[0].attach(reference)]
    model.compile(backend="aot_eager")
    model.zero_grad()
    forward_backward(model, batch)  # a training step through the full backward hook
    forward_backward(reference, batch)  # the same BatchNorm statistics update
    assert all(torch.allclose(p.grad, q.grad, atol=1e-5) for p, q in zip(model.parameters(), reference.parameters()))
    heatmaps = plugin[0].compute(model, batch).heatmaps
    assert torch.allclose(heatmaps, eager[0].compute(reference, batch).heatmaps, atol=1e-5)
    for handle in handles:
        handle.remove()

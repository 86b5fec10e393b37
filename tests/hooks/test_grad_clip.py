"""grad_clip: gradients bounded exactly by the value, untouched where already inside it."""

from __future__ import annotations

import copy

import torch
from torch import nn

from modelforge.hooks import build_hook_plugins
from tests.helpers.tiny_net import forward_backward, module_hooks

VALUE = 0.05


def grads_with_and_without(model: nn.Module, batch: torch.Tensor, options: dict) -> tuple[dict, dict]:
    reference = copy.deepcopy(model)
    forward_backward(reference, batch)
    with build_hook_plugins({"grad_clip": options})[0].attach(model):
        forward_backward(model, batch)
    clipped = {n: p.grad for n, p in model.named_parameters()}
    return clipped, {n: p.grad for n, p in reference.named_parameters()}


def test_clipped_gradients_equal_the_clamped_unclipped_ones(model, batch) -> None:
    clipped, free = grads_with_and_without(model, batch, {"value": VALUE})
    free_all = torch.cat([g.flatten() for g in free.values()])
    # The comparison means something only if some gradients lie outside the bound and some inside.
    assert (free_all.abs() > VALUE).sum() > 10 and (free_all.abs() < VALUE).sum() > 10
    for name, grad in clipped.items():
        assert grad.abs().max() <= VALUE, name
        assert torch.equal(grad, free[name].clamp(-VALUE, VALUE)), name
        inside = free[name].abs() <= VALUE
        assert torch.equal(grad[inside], free[name][inside]), name


def test_only_the_chosen_layers_are_clipped(model, batch) -> None:
    clipped, free = grads_with_and_without(model, batch, {"value": VALUE, "layers": ["decoder.*"]})
    assert torch.equal(clipped["decoder.1.weight"], free["decoder.1.weight"].clamp(-VALUE, VALUE))
    assert not torch.equal(clipped["decoder.1.weight"], free["decoder.1.weight"])
    for name in ("encoder.0.weight", "encoder.1.weight", "encoder.3.bias"):
        assert torch.equal(clipped[name], free[name]), name
        assert free[name].abs().max() > VALUE  # so equality shows the layer was left alone


def test_one_hook_per_trainable_parameter_even_when_targets_overlap(model) -> None:
    model.encoder[1].weight.requires_grad_(False)  # frozen: no gradient, no hook
    trainable = sum(p.requires_grad for p in model.parameters())
    with build_hook_plugins({"grad_clip": {"layers": ["encoder", "encoder.*", "Conv2d", "decoder"]}})[0].attach(model):
        assert module_hooks(model)["tensor._backward_hooks"] == trainable


def test_gradient_accumulation_clamps_each_backward(model, batch) -> None:
    with build_hook_plugins({"grad_clip": {"value": VALUE}})[0].attach(model):
        forward_backward(model, batch)
        forward_backward(model, batch)
    # Two clamped contributions add up: the accumulated gradient may reach twice the bound.
    assert max(p.grad.abs().max() for p in model.parameters()) == 2 * VALUE

"""Every plugin: attach registers hooks, removal leaves none, re-attach never stacks, no global hooks."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from modelforge.hooks import HookPlugin, build_hook_plugins
from modelforge.registry import HOOKS
from tests.helpers.tiny_net import (
    forward_backward,
    global_hook_count,
    hook_count,
    module_hooks,
    options_for,
)

PLUGINS = HOOKS.names()


def make(name: str, **options: object) -> HookPlugin:
    return build_hook_plugins({name: options_for(name, **options)})[0]


def test_the_builtin_plugins_are_registered() -> None:
    assert {"verbose", "grad_clip", "feature_capture", "grad_monitor",
            "ablate", "input_noise", "grad_cam", "activation_stats"} <= set(PLUGINS)


@pytest.mark.parametrize("name", PLUGINS)
def test_remove_leaves_no_hook_on_any_module_or_tensor(name, model, batch, tmp_path: Path) -> None:
    assert hook_count(model) == 0
    handle = make(name).attach(model, run_dir=tmp_path)
    assert handle.attached and hook_count(model) > 0
    forward_backward(model, batch)
    handle.remove()
    assert module_hooks(model) == dict.fromkeys(module_hooks(model), 0)
    handle.remove()  # a second removal is harmless


@pytest.mark.parametrize("name", PLUGINS)
def test_handle_is_a_context_manager(name, model, batch, tmp_path: Path) -> None:
    with make(name).attach(model, run_dir=tmp_path) as handle:
        assert hook_count(model) > 0
        forward_backward(model, batch)
    assert not handle.attached and hook_count(model) == 0


@pytest.mark.parametrize("name", PLUGINS)
def test_attaching_twice_replaces_instead_of_stacking(name, model, tmp_path: Path) -> None:
    plugin = make(name)
    first = plugin.attach(model, run_dir=tmp_path)
    once = module_hooks(model)
    second = plugin.attach(model, run_dir=tmp_path)
    assert module_hooks(model) == once
    assert not first.attached and second.attached and plugin.attached
    plugin.detach()
    assert hook_count(model) == 0 and not plugin.attached


@pytest.mark.parametrize("name", PLUGINS)
def test_never_registers_global_hooks(name, model, batch, tmp_path: Path) -> None:
    assert global_hook_count() == 0
    with make(name).attach(model, run_dir=tmp_path):
        forward_backward(model, batch)
        assert global_hook_count() == 0


@pytest.mark.parametrize("name", PLUGINS)
def test_state_dict_keys_are_the_same_with_a_plugin_attached(name, model, tmp_path: Path) -> None:
    before = list(model.state_dict())
    with make(name).attach(model, run_dir=tmp_path):
        assert list(model.state_dict()) == before


@pytest.mark.parametrize("name", PLUGINS)
def test_a_failed_attach_leaves_no_hooks(name, model) -> None:
    if HOOKS.get(name).pattern_key == "layer":  # grad_cam: one layer, so the second pattern is the only one
        with pytest.raises(Exception, match=r"layer: 'nope' matches no module"):
            make(name, layer="nope").attach(model)
        return
    with pytest.raises(Exception, match=r"layers\[1\]: 'nope' matches no module"):
        make(name, layers=["encoder.*", "nope"]).attach(model)
    assert hook_count(model) == 0


def test_no_plugins_cost_nothing(model, batch) -> None:
    assert build_hook_plugins(None) == [] and build_hook_plugins({}) == []
    forward_backward(model, batch)
    assert hook_count(model) == 0 and global_hook_count() == 0


def test_outputs_and_gradients_are_unchanged_by_observing_plugins(model, batch, tmp_path: Path) -> None:
    reference = forward_backward(model, batch).detach()
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    plugins = build_hook_plugins({"verbose": {}, "feature_capture": {}, "grad_monitor": {}})
    handles = [p.attach(model, run_dir=tmp_path) for p in plugins]
    assert torch.equal(forward_backward(model, batch), reference)
    assert all(torch.equal(p.grad, g) for p, g in zip(model.parameters(), grads))
    for handle in handles:
        handle.remove()


class HalfDone(HookPlugin):
    """Registers one hook, then fails: the attach must take that hook back."""

    name = "half_done"

    def _register(self, targets, handles, *, run_dir, logger) -> None:
        handles.append(targets[0].module.register_forward_hook(lambda *args: None))
        raise RuntimeError("failed after registering")


def test_hooks_registered_before_a_failure_are_removed(model) -> None:
    with pytest.raises(RuntimeError, match="failed after registering"):
        HalfDone().attach(model)
    assert hook_count(model) == 0

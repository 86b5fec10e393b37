from __future__ import annotations

import pytest
import torch
from torch import nn

from modelforge import INITIALIZERS, ConfigError, build_model, initialize


def _net() -> nn.Module:
    return nn.Sequential(nn.Conv2d(1, 8, 3), nn.BatchNorm2d(8), nn.Flatten(), nn.Linear(8, 4))


@pytest.mark.parametrize("name", [n for n in INITIALIZERS.names(plugins=False) if n != "default"])
def test_every_initializer_changes_conv_weights_only(name: str) -> None:
    torch.manual_seed(0)
    net = _net()
    before = {k: v.clone() for k, v in net.state_dict().items()}
    initialize(net, {"conv": name})
    after = net.state_dict()
    assert not torch.equal(before["0.weight"], after["0.weight"]) or name in ("ones", "zeros", "constant")
    for key in ("0.bias", "1.weight", "3.weight", "3.bias"):
        assert torch.equal(before[key], after[key]), key


def test_rules_per_module_kind() -> None:
    net = initialize(_net(), {"linear": {"name": "constant", "val": 0.5}, "bias": "zeros",
                              "norm": {"name": "constant", "val": 2.0}})
    assert torch.all(net[3].weight == 0.5) and torch.all(net[3].bias == 0) and torch.all(net[0].bias == 0)
    assert torch.all(net[1].weight == 2.0)


def test_a_bias_rule_of_one_kind_takes_the_place_of_bias() -> None:
    """conv_bias or linear_bias, when given, rule that kind's biases ("default": PyTorch's); unset, bias rules them."""
    torch.manual_seed(0)
    kept = _net()[0].bias.clone()
    torch.manual_seed(0)
    net = initialize(_net(), {"bias": "zeros", "conv_bias": "default"})
    assert torch.equal(net[0].bias, kept) and torch.all(net[3].bias == 0)
    net = initialize(_net(), {"bias": "zeros", "linear_bias": {"name": "constant", "val": 0.5}})
    assert torch.all(net[0].bias == 0) and torch.all(net[3].bias == 0.5)


def test_an_unknown_rule_names_the_rules() -> None:
    with pytest.raises(ConfigError, match=r"model.init.conv_bais: no init rule 'conv_bais'[\s\S]*did you mean 'conv_bias'"):
        build_model({"name": "graph", "nodes": {"c": {"block": "nn.Conv2d", "args": {"out_channels": 2}}},
                     "init": {"conv_bais": "zeros"}})


def test_normal_std_is_respected() -> None:
    net = nn.Linear(1000, 1000)
    initialize(net, {"linear": {"name": "normal", "std": 0.02}})
    assert net.weight.std().item() == pytest.approx(0.02, rel=0.02)


def test_default_keeps_pytorch_init() -> None:
    torch.manual_seed(1)
    a = _net()
    torch.manual_seed(1)
    b = initialize(_net(), {"conv": "default", "linear": "default"})
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))


def test_init_runs_without_autograd_history() -> None:
    net = initialize(_net(), {"conv": "kaiming_normal"})
    assert net[0].weight.grad_fn is None and net[0].weight.requires_grad


def test_same_seed_same_weights_and_global_rng_untouched() -> None:
    cfg = {"name": "cnn", "init": {"conv": "kaiming_normal", "linear": "xavier_uniform"}}
    torch.manual_seed(123)
    state = torch.get_rng_state()
    a, b = build_model(cfg, seed=7), build_model(cfg, seed=7)
    assert torch.equal(torch.get_rng_state(), state)
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))
    c = build_model(cfg, seed=8)
    assert not torch.equal(a.encoder[0].conv.weight, c.encoder[0].conv.weight)


def test_unknown_rule_and_initializer_are_config_errors() -> None:
    with pytest.raises(ConfigError, match=r"(?s)model.init.conv: unknown initializer 'kaiming'.*did you mean"):
        build_model({"name": "cnn", "init": {"conv": "kaiming"}})
    with pytest.raises(ConfigError, match=r"(?s)model.init.weights: no init rule 'weights'.*allowed: conv, linear, bias, norm"):
        build_model({"name": "cnn", "init": {"weights": "zeros"}})
    with pytest.raises(ConfigError, match=r"model.init.linear.sd: initializer 'normal' takes no option 'sd'"):
        build_model({"name": "cnn", "init": {"linear": {"name": "normal", "sd": 1}}})

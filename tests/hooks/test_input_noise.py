"""input_noise: a forward pre-hook that replaces a module's input by a noisy copy (training mode only by default)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from modelforge.errors import ConfigError
from modelforge.hooks import build_hook_plugins
from tests.helpers.tiny_net import hook_count


class Recorder(nn.Module):
    """Identity that keeps what it was given."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.seen = x.detach().clone()
        return x


def noise(**options: object):
    return build_hook_plugins({"input_noise": options})[0]


def test_adds_gaussian_noise_of_the_given_std_in_training_only() -> None:
    model = Recorder()
    x = torch.zeros(64, 1, 32, 32)
    with noise(std=0.5).attach(model):
        torch.manual_seed(0)
        model.train()(x)
        delta = model.seen - x
        assert abs(delta.std().item() - 0.5) < 0.01 and abs(delta.mean().item()) < 0.01
        torch.manual_seed(0)
        model(x)  # same seed, same noise: runs are repeatable
        assert torch.equal(model.seen - x, delta)
        model.eval()(x)
        assert torch.equal(model.seen, x)  # eval: clean input
    assert hook_count(model) == 0


def test_always_perturbs_in_eval_too_and_targets_a_chosen_layer(model, batch) -> None:
    torch.manual_seed(1)
    model.eval()
    with torch.no_grad():
        clean = model(batch)
    plugin = noise(std=1.0, always=True, layers=["decoder.1"])
    with plugin.attach(model), torch.no_grad():
        torch.manual_seed(1)
        noisy = model(batch)
        features = model.decoder[0](model.encoder(batch))
    torch.manual_seed(1)
    expected = model.decoder[1](features + torch.randn_like(features)).detach()
    assert torch.allclose(noisy, expected, atol=1e-5) and not torch.allclose(noisy, clean)


def test_zero_std_changes_nothing_and_a_negative_std_is_refused(model, batch) -> None:
    with noise(std=0.0, always=True).attach(model), torch.no_grad():
        out = model.eval()(batch)
    with torch.no_grad():
        assert torch.equal(out, model(batch))
    with pytest.raises(ConfigError, match=r"^hooks\.input_noise\.std: must be a finite number >= 0, got -0\.1"):
        noise(std=-0.1)

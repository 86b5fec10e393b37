"""ablate: a forward hook that returns a new output with chosen channels zeroed or mean-replaced."""

from __future__ import annotations

import pytest
import torch

from modelforge.errors import ConfigError
from modelforge.hooks import build_hook_plugins
from tests.helpers.tiny_net import hook_count


def ablate(**options: object):
    return build_hook_plugins({"ablate": options})[0]


def conv_out(model, batch):
    with torch.no_grad():
        return model.encoder[0](batch)


def test_zeroes_the_chosen_channels_and_only_those(model, batch) -> None:
    model.eval()
    clean = conv_out(model, batch)
    with ablate(layers=["encoder.0"], channels=[0, 3]).attach(model):
        ablated = conv_out(model, batch)
    assert torch.equal(ablated[:, [0, 3]], torch.zeros_like(ablated[:, [0, 3]]))
    assert torch.equal(ablated[:, [1, 2]], clean[:, [1, 2]])
    assert clean[:, [0, 3]].abs().sum() > 0
    assert torch.equal(conv_out(model, batch), clean) and hook_count(model) == 0  # removed: the model is as before


def test_mean_mode_replaces_a_channel_by_its_batch_and_position_mean(model, batch) -> None:
    model.eval()
    clean = conv_out(model, batch)
    with ablate(layers=["encoder.0"], channels=[1], mode="mean").attach(model):
        ablated = conv_out(model, batch)
    assert torch.allclose(ablated[:, 1], clean[:, 1].mean().expand_as(ablated[:, 1]))
    assert torch.equal(ablated[:, [0, 2, 3]], clean[:, [0, 2, 3]])


def test_all_channels_of_the_last_encoder_layer_make_the_output_input_independent(model) -> None:
    model.eval()
    x = torch.randn(5, 1, 8, 8, generator=torch.Generator().manual_seed(3))
    with ablate(layers=["encoder.4"], channels="all").attach(model), torch.no_grad():
        out = model(x)
    assert torch.allclose(out, out[:1].expand_as(out))  # every image gives the bias-only logits
    assert torch.allclose(out[0], model.decoder[1].bias.detach())


def test_units_of_a_linear_layer_and_gradients_flow_around_them(model, batch) -> None:
    with ablate(layers=["decoder.1"], channels=[2]).attach(model):
        out = model(batch)
        out.sum().backward()
    assert torch.equal(out[:, 2], torch.zeros(2))
    assert torch.equal(model.decoder[1].weight.grad[2], torch.zeros_like(model.decoder[1].weight.grad[2]))
    assert model.decoder[1].weight.grad[1].abs().sum() > 0


def test_refusals_name_the_option(model, batch) -> None:
    with pytest.raises(ConfigError, match=r"^hooks\.ablate\.layers: must name the layers to ablate"):
        ablate()
    with pytest.raises(ConfigError, match=r"^hooks\.ablate\.mode: .*'average'.*\n.*zero"):
        ablate(layers=["encoder.0"], mode="average")
    with pytest.raises(ConfigError, match=r"^hooks\.ablate\.channels\[1\]: must be >= 0, got -1"):
        ablate(layers=["encoder.0"], channels=[0, -1])
    plugin = ablate(layers=["encoder.0"], channels=[7])
    with plugin.attach(model), pytest.raises(ConfigError, match=r"hooks\.ablate\.channels: \[7\] out of range "
                                                                r"for 'encoder\.0', which has 4 channels"):
        model(batch)

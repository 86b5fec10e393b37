from __future__ import annotations

import pytest
import torch
from torch import nn

from modelforge import ConfigError, build_model
from modelforge.models import CNN


@pytest.mark.parametrize(
    ("overrides", "flat"),
    [
        ({}, 64 * 7 * 7),
        ({"enc_sizes": [16]}, 16 * 14 * 14),
        ({"enc_sizes": [8, 16, 32]}, 32 * 3 * 3),
        ({"pool": None}, 64 * 28 * 28),
        ({"input_size": [32, 20]}, 64 * 8 * 5),
        ({"kernel_size": 5, "padding": 0, "pool": None}, 64 * 20 * 20),
    ],
)
def test_decoder_width_is_inferred_from_shapes(overrides: dict, flat: int) -> None:
    model = build_model({"name": "cnn", **overrides})
    assert model.decoder[0].linear.in_features == flat
    h, w = overrides.get("input_size", [28, 28])
    assert model(torch.randn(2, 1, h, w)).shape == (2, 10)


def test_final_linear_is_used_in_forward() -> None:
    model = build_model({"name": "cnn", "n_classes": 7})
    seen = []
    model.head.register_forward_hook(lambda m, i, o: seen.append(o.shape))
    out = model(torch.randn(3, 1, 28, 28))
    assert seen == [torch.Size([3, 7])] and out.shape == (3, 7)


def test_encoder_is_sequential_over_size_pairs() -> None:
    model = build_model({"name": "cnn", "in_channels": 3, "enc_sizes": [8, 16, 4]})
    convs = [block.conv for block in model.encoder]
    assert [(c.in_channels, c.out_channels) for c in convs] == [(3, 8), (8, 16), (16, 4)]


def test_no_decoder_blocks() -> None:
    model = build_model({"name": "cnn", "dec_sizes": []})
    assert len(model.decoder) == 0 and model.head.in_features == 64 * 7 * 7


def test_activation_mapping_with_options_and_separate_decoder_activation() -> None:
    model = build_model({"name": "cnn", "activation": {"name": "lrelu", "negative_slope": 0.3},
                         "dec_activation": "tanh"})
    assert model.encoder[0].act.negative_slope == 0.3
    assert isinstance(model.decoder[0].act, nn.Tanh)


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        ({"enc_sizes": [32, -4]}, r"model.enc_sizes\[1\]: must be positive, got -4"),
        ({"enc_sizes": []}, r"model.enc_sizes: must not be empty"),
        ({"dec_sizes": 128}, r"model.dec_sizes: expected list of int, got int 128"),
        ({"enc_sizes": ["a"]}, r"model.enc_sizes\[0\]: expected int, got str 'a'"),
        ({"activation": "gelu2"}, r"model.activation: unknown activation 'gelu2'\n  did you mean 'gelu'\?"),
        ({"enc_size": [3]}, r"model.enc_size: model 'cnn' has no option 'enc_size'\n  did you mean 'enc_sizes'\?"),
        ({"pool": "maxx"}, r"model.pool: expected 'max' \| 'avg' or null, got str 'maxx'\n  did you mean 'max'\?"),
        ({"kernel_size": 9, "padding": 0, "enc_sizes": [8, 8, 8]},
         r"model.kernel_size: kernel 9 is larger than the 1x1 feature map \(padding 0\) that encoder layer 2 \(enc_sizes\[2\]=8\)"),
        ({"enc_sizes": [4, 4, 4, 4, 4, 4]}, r"model.enc_sizes: the feature map shrinks to nothing after encoder layer 4"),
        ({"dropout": 1.5}, r"model.dropout: must be in \[0, 1\)"),
        ({"input_size": [28]}, r"model.input_size: expected \[height, width\]"),
    ],
)
def test_bad_config_is_a_clear_error(overrides: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        build_model({"name": "cnn", **overrides})


def test_cnn_class_is_usable_without_configs() -> None:
    model = CNN(in_channels=3, input_size=(16, 16), enc_sizes=[4], dec_sizes=[8], n_classes=2)
    assert model(torch.randn(1, 3, 16, 16)).shape == (1, 2)

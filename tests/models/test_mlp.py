from __future__ import annotations

import pytest
import torch

from modelforge import ConfigError, build_model


def test_mlp_widths_and_forward() -> None:
    model = build_model({"name": "mlp", "hidden_sizes": [32, 16], "n_classes": 5})
    assert [b.linear.out_features for b in model.hidden] == [32, 16]
    assert model.hidden[0].linear.in_features == 28 * 28
    assert model(torch.randn(4, 1, 28, 28)).shape == (4, 5)


def test_mlp_rejects_cnn_keys() -> None:
    with pytest.raises(ConfigError, match=r"model.enc_sizes: model 'mlp' has no option 'enc_sizes'"):
        build_model({"name": "mlp", "enc_sizes": [3]})

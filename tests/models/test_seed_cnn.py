"""`seed_cnn` is the seeds' CNNClassifier exactly: compared layer by layer with a hand-written copy."""

from __future__ import annotations

import torch
from torch import nn

from modelforge import build_model


def conv_block(in_f: int, out_f: int) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(in_f, out_f, kernel_size=3, padding=1), nn.BatchNorm2d(out_f), nn.ReLU())


class HandWrittenCNNClassifier(nn.Module):
    """The seeds' classifier, with its forgotten final Linear put back into forward."""

    def __init__(self, in_c: int = 1, enc_sizes=(32, 64), dec_sizes=(1024,), n_classes: int = 10) -> None:
        super().__init__()
        enc = [in_c, *enc_sizes]
        self.encoder = nn.Sequential(*[conv_block(a, b) for a, b in zip(enc, enc[1:])])
        dec = [enc[-1] * 28 * 28, *dec_sizes]
        self.decoder = nn.Sequential(*[nn.Sequential(nn.Linear(a, b), nn.Sigmoid()) for a, b in zip(dec, dec[1:])])
        self.last = nn.Linear(dec[-1], n_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.last(self.decoder(self.encoder(x).flatten(1)))


def _leaves(model: nn.Module) -> list[nn.Module]:
    return [m for m in model.modules() if not list(m.children())]


def test_seed_cnn_has_51_410_506_parameters() -> None:
    assert sum(p.numel() for p in build_model({"name": "seed_cnn"}).parameters()) == 51_410_506


def test_seed_cnn_matches_hand_written_copy_layer_by_layer() -> None:
    ours = [m for m in _leaves(build_model({"name": "seed_cnn"})) if not isinstance(m, nn.Flatten)]
    theirs = _leaves(HandWrittenCNNClassifier())
    assert [type(m) for m in ours] == [type(m) for m in theirs]
    for a, b in zip(ours, theirs):
        assert [tuple(p.shape) for p in a.parameters()] == [tuple(p.shape) for p in b.parameters()]
        assert repr(a) == repr(b)


def test_seed_cnn_computes_the_same_function_with_the_same_weights() -> None:
    ours, theirs = build_model({"name": "seed_cnn"}), HandWrittenCNNClassifier()
    with torch.no_grad():
        for a, b in zip(ours.parameters(), theirs.parameters()):
            b.copy_(a)
    x = torch.randn(2, 1, 28, 28)
    torch.testing.assert_close(ours.eval()(x), theirs.eval()(x))

"""activation_stats: forward hooks read activations, tensor hooks on them read their gradients."""

from __future__ import annotations

import pytest
import pytorch_lightning as pl

from modelforge.hooks import build_hook_plugins
from modelforge.train.hook_callback import HookPluginsCallback
from tests.helpers.tiny_net import hook_count
from tests.helpers.lit_tiny import LitTiny, MemoryLogger, loader

pytestmark = [pytest.mark.filterwarnings("ignore:.*treespec"),
              pytest.mark.filterwarnings("ignore:The number of training batches"),
              pytest.mark.filterwarnings("ignore:You defined a `validation_step`")]


def test_stats_of_activations_and_of_their_gradients_equal_a_hand_count(model, batch) -> None:
    plugin = build_hook_plugins({"activation_stats": {"layers": ["encoder.4"], "log_every": 1}})[0]
    act = model.encoder(batch)
    act.retain_grad()
    model.decoder(act).pow(2).sum().backward()
    expected_grad = act.grad.clone()
    with plugin.attach(model):
        model.decoder[1].zero_grad()
        model(batch).pow(2).sum().backward()
    stats = plugin.stats["encoder.4"]
    assert stats["act_mean"] == pytest.approx(act.mean().item(), rel=1e-5)
    assert stats["act_std"] == pytest.approx(act.std(unbiased=False).item(), rel=1e-5)
    assert stats["act_zeros"] == pytest.approx((act == 0).float().mean().item())  # dead ReLU units
    assert 0 < stats["act_zeros"] < 1
    assert stats["grad_mean"] == pytest.approx(expected_grad.mean().item(), rel=1e-5, abs=1e-7)
    assert stats["grad_std"] == pytest.approx(expected_grad.std(unbiased=False).item(), rel=1e-5)
    assert stats["grad_zeros"] == pytest.approx((expected_grad == 0).float().mean().item())
    assert hook_count(model) == 0


def test_logged_for_training_steps_like_grad_monitor() -> None:
    logger = MemoryLogger()
    plugin = build_hook_plugins({"activation_stats": {"layers": ["encoder.2"], "log_every": 1}})[0]
    trainer = pl.Trainer(callbacks=[HookPluginsCallback([plugin])], accelerator="cpu", logger=logger,
                         max_steps=2, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, log_every_n_steps=1)
    trainer.fit(LitTiny(), loader())
    logged = [(sorted(m), step) for m, step in logger.metrics if any(k.startswith(("act_", "grad_")) for k in m)]
    assert logged == [(["act_mean/encoder.2", "act_std/encoder.2", "act_zeros/encoder.2"], 0),
                      (["grad_mean/encoder.2", "grad_std/encoder.2", "grad_zeros/encoder.2"], 0),
                      (["act_mean/encoder.2", "act_std/encoder.2", "act_zeros/encoder.2"], 1),
                      (["grad_mean/encoder.2", "grad_std/encoder.2", "grad_zeros/encoder.2"], 1)]

"""verbose in a real Lightning run: one table per run, of the first training batch, under a header naming it."""

from __future__ import annotations

import logging

import pytest
import pytorch_lightning as pl

from modelforge.hooks import build_hook_plugins
from modelforge.train.hook_callback import HookPluginsCallback
from tests.helpers.lit_tiny import LitTiny, loader

pytestmark = [pytest.mark.filterwarnings("ignore:.*treespec"),
              pytest.mark.filterwarnings("ignore:The number of training batches")]
LOGGER = "modelforge.hooks.verbose"


def test_fit_then_test_logs_the_first_training_batch_once(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    plugin = build_hook_plugins({"verbose": {"layers": ["decoder.1"]}})[0]
    trainer = pl.Trainer(callbacks=[HookPluginsCallback([plugin])], accelerator="cpu", logger=False,
                         max_epochs=1, num_sanity_val_steps=1, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False)
    module = LitTiny()
    trainer.fit(module, loader(), loader())  # a sanity-check validation batch runs before training
    trainer.test(module, loader(), verbose=False)
    lines = [r.getMessage() for r in caplog.records if r.name == LOGGER]
    assert lines == ["output shapes of the train stage's batch 1 of this run:", "decoder.1  Linear  -> [4, 10]"]
    assert plugin.logged_stages == ["train"]


def test_an_eval_run_logs_its_first_test_batch(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    plugin = build_hook_plugins({"verbose": {"layers": ["decoder.1"]}})[0]
    trainer = pl.Trainer(callbacks=[HookPluginsCallback([plugin])], accelerator="cpu", logger=False,
                         enable_progress_bar=False, enable_model_summary=False)
    trainer.test(LitTiny(), loader(), verbose=False)
    assert plugin.logged_stages == ["test"]
    assert [r.getMessage() for r in caplog.records if r.name == LOGGER][0].startswith("output shapes of the test")

"""ResumeState: Lightning's warning about a mid-epoch resume is silenced when a resume starts, not at import."""

from __future__ import annotations

import warnings

from pytorch_lightning.utilities.warnings import PossibleUserWarning

from modelforge.train.checkpoints import ResumeState

MID_EPOCH = ("You're resuming from a checkpoint that ended before the epoch ended and your dataloader is"
             " not resumable. This can cause unreliable results if further training is done.")


def test_loading_a_checkpoint_silences_the_mid_epoch_warning_whatever_filters_came_before() -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")  # as pytest's per-test scope: any filter set at import is behind it
        ResumeState.load(None, {})  # a checkpoint without resume state
        warnings.warn(MID_EPOCH, PossibleUserWarning)
        warnings.warn("another warning", PossibleUserWarning)
    assert [str(w.message) for w in caught] == ["another warning"]

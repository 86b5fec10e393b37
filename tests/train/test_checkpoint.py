"""load_checkpoint: a file the weights-only loader refuses is one CheckpointError, with no torch warning beside it."""

from __future__ import annotations

import os
import pickle
import warnings
from pathlib import Path

import pytest
import torch

from modelforge import CheckpointError
from modelforge.deploy.load import load_checkpoint


class RunsCode:
    def __reduce__(self):
        return (os.system, ("echo pwned",))


def _plain_pickle(path: Path) -> None:
    with path.open("wb") as handle:
        pickle.dump({"state_dict": {}, "payload": RunsCode()}, handle, protocol=5)


def _torch_save_protocol_5(path: Path) -> None:
    torch.save({"state_dict": {}, "payload": RunsCode()}, path, pickle_protocol=5)


@pytest.mark.parametrize("write", [_plain_pickle, _torch_save_protocol_5], ids=["pickle.dump", "torch.save"])
def test_a_refused_pickle_protocol_is_one_message_without_torchs_warning(write, tmp_path: Path) -> None:
    bad = tmp_path / "bad.ckpt"
    write(bad)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(CheckpointError, match=r"^ckpt_path: .*bad\.ckpt is not a loadable checkpoint "
                                                  r"\(weights-only load refused it: Unsupported operand 149\)$"):
            load_checkpoint(bad)
    assert [str(w.message) for w in caught] == []


def test_the_protocol_warning_is_silenced_for_that_load_only(tmp_path: Path) -> None:
    bad = tmp_path / "bad.ckpt"
    _plain_pickle(bad)
    with pytest.raises(CheckpointError):
        load_checkpoint(bad)
    with pytest.warns(UserWarning, match=r"Detected pickle protocol 5 in the checkpoint"), \
            pytest.raises(pickle.UnpicklingError):
        torch.load(bad, weights_only=True)

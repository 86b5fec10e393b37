"""stopped_by_signals: SIGTERM (a real signal) and Ctrl-C leave the block as Terminated / Interrupted saying what
they interrupted, also when an exporter wrapped them in an error of its own; the handler before is restored."""

from __future__ import annotations

import signal

import pytest

from modelforge.deploy.signals import stopped_by_signals
from modelforge.errors import Interrupted, Terminated


def _wrapped(stop) -> None:
    """What torch.onnx does with whatever stops its export: an error of its own, raised while handling it."""
    try:
        stop()
    except BaseException as exc:  # noqa: BLE001 - as the exporter does
        raise RuntimeError("Failed to export the model with torch.export") from exc


@pytest.mark.parametrize("wrapped", [False, True], ids=["raised", "wrapped by the exporter"])
def test_sigterm_is_terminated_saying_what_it_interrupted(wrapped: bool) -> None:
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(Terminated) as caught:
        with stopped_by_signals("while loading") as now:
            now.what = "while writing m.pt2; it was not written"
            send = lambda: signal.raise_signal(signal.SIGTERM)  # noqa: E731
            _wrapped(send) if wrapped else send()
    assert str(caught.value) == "stopped by SIGTERM while writing m.pt2; it was not written"
    assert caught.value.exit_code == 143 and signal.getsignal(signal.SIGTERM) is before


def test_ctrl_c_is_interrupted_and_other_errors_pass_unchanged() -> None:
    def ctrl_c() -> None:
        raise KeyboardInterrupt

    with pytest.raises(Interrupted, match=r"^stopped by Ctrl-C \(SIGINT\) while exporting cnn to onnx$") as caught:
        with stopped_by_signals("while exporting cnn to onnx"):
            _wrapped(ctrl_c)
    assert caught.value.exit_code == 130
    with pytest.raises(ValueError, match="^a bug$"):
        with stopped_by_signals("while loading"):
            raise ValueError("a bug")

"""What a run says of how it starts, before it trains: ``init.from`` and ``freeze`` (transfer.py), the optimizer's
param groups (``optim.param_groups``, ``optim.no_decay_norm_bias``) and weight averaging (``callbacks=[ema]``,
``[swa]``), as log lines and as metrics.json entries."""

from __future__ import annotations

from typing import Any

from modelforge.train.averaging import describe_averaging
from modelforge.train.optim import build_optimizer, describe_groups, group_line
from modelforge.train.run_config import RunConfig


def setup_report(run: RunConfig) -> tuple[list[str], dict[str, Any]]:
    """The lines to log and the entries for metrics.json (``init``, ``frozen``, ``param_groups``, ``averaging``)."""
    model = run.network
    groups = describe_groups(build_optimizer(model, run.config["optim"]))  # a throwaway: state is made at a step
    averaging_lines, averaging = describe_averaging(run.config, model)
    lines = [*run.transfer.lines(model), *filter(None, [group_line(groups)]), *averaging_lines]
    return lines, {**run.transfer.record(model), **({"param_groups": groups} if groups else {}), **averaging}

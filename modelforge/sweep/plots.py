"""The pictures of a search, written into its sweep dir: the optimization history of each objective and, for two
objectives, the Pareto front (Optuna's matplotlib visualizations)."""

from __future__ import annotations

import logging
import re
import sys
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


def plot_study(study: Any, objectives: Sequence[str], sweep_dir: Path) -> list[Path]:
    """Write the PNGs for ``study`` (objectives named as in the config); a plot that fails is logged, not raised."""
    from optuna.trial import TrialState

    if not study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        return []  # nothing to draw
    if "matplotlib.pyplot" not in sys.modules:  # no display needed; a program's own pyplot keeps its backend
        import matplotlib

        matplotlib.use("Agg")
    from optuna.visualization import matplotlib as optuna_plots

    pictures: dict[str, Callable[[], Any]] = {}
    if len(objectives) == 1:
        pictures["optimization_history.png"] = lambda: optuna_plots.plot_optimization_history(
            study, target_name=objectives[0])
    else:
        for i, name in enumerate(objectives):
            pictures[f"optimization_history_{_file_part(name)}.png"] = lambda i=i, name=name: (
                optuna_plots.plot_optimization_history(study, target=lambda t: t.values[i], target_name=name))
    if len(objectives) == 2:
        pictures["pareto_front.png"] = lambda: optuna_plots.plot_pareto_front(study, target_names=list(objectives))
    return [path for name, draw in pictures.items() if (path := _save(draw, sweep_dir / name))]


def _save(draw: Callable[[], Any], path: Path) -> Path | None:
    import matplotlib
    import matplotlib.pyplot as plt
    from optuna.exceptions import ExperimentalWarning

    from modelforge.files.atomic import write_with

    try:
        # Optuna's plots set pyplot's style for the whole process: rc_context puts it back.
        with warnings.catch_warnings(), matplotlib.rc_context():
            warnings.simplefilter("ignore", ExperimentalWarning)  # Optuna marks its matplotlib plots experimental
            ax = draw()
            figure = (ax.flat[0] if hasattr(ax, "flat") else ax).figure
            write_with(path, lambda handle: figure.savefig(handle, format="png", dpi=100, bbox_inches="tight"))
            plt.close(figure)
        return path
    except Exception as exc:  # noqa: BLE001 - a picture is never worth failing a finished search for
        log.warning("could not draw %s: %s: %s", path.name, type(exc).__name__, exc)
        return None


def _file_part(name: str) -> str:
    return re.sub(r"\W+", "_", name).strip("_") or "objective"

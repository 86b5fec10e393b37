"""modelforge's Hydra sweeper on Optuna >= 4: ``override /hydra/sweeper: modelforge_optuna``.

Hydra imports every module of the ``hydra_plugins`` namespace at start-up, for any Hydra app: these modules import
only Hydra; the search itself (:mod:`modelforge.sweep.search`) is imported when a sweep starts.
"""

"""Sweeps (``train -m``): the summary table, DDP jobs, and Optuna searches (modelforge's Hydra sweeper,
``hydra_plugins/modelforge_optuna_sweeper``: search space, study and storage, the ask-launch-tell loop, pruning,
plots). Lightning only in :mod:`modelforge.sweep.pruning`, Optuna only where a search runs."""

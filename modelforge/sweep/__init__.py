"""Sweeps (``train -m``): the summary table, Optuna's logging and study resume, DDP jobs. No Lightning here."""

"""Sweeps: a summary table of the jobs (a Hydra callback) and the Optuna study's resumption.

No Lightning here: the callbacks run in the sweep's parent process.
"""

"""``python -m modelforge <command> [overrides]``: thin dispatch to the commands."""

from __future__ import annotations

import sys

# command -> one-line help. Its code is imported when it runs: `list` never loads Lightning.
COMMANDS = {
    "train": "train a model on MNIST (Hydra app; -m for sweeps)",
    "eval": "evaluate a checkpoint: eval ckpt_path=RUN/checkpoints/last.ckpt",
    "summary": "print the model a config builds: layers, shapes, parameters",
    "export": "export a checkpoint to pt2, onnx or torchscript, checked against the eager model",
    "predict": "classify images with a checkpoint or an exported model: predict ckpt_path=... inputs=DIR",
    "list": "list registries and their names: list [REGISTRY] [GLOB]",
    "diff": "compare two runs, sweep jobs or checkpoints: diff RUN_A RUN_B (exit 0: the same experiment)",
}

# What `pip install modelforge` leaves out and these commands need: the `train` extra (pyproject.toml), by the
# modules it brings. summary and list run on the builders alone.
NEEDS_TRAIN_EXTRA = ("train", "eval", "export", "predict")
TRAIN_EXTRA_MODULES = ("pytorch_lightning", "torchmetrics", "matplotlib", "PIL")


def _importable(module: str) -> bool:
    from importlib.util import find_spec

    try:
        return find_spec(module) is not None
    except (ImportError, ValueError):  # ValueError: blocked by sys.modules[module] = None
        return False


def missing_extra(command: str) -> str | None:
    """One line naming the extra to install when ``command`` needs one that is missing, else None."""
    if command not in NEEDS_TRAIN_EXTRA:
        return None
    missing = [module for module in TRAIN_EXTRA_MODULES if not _importable(module)]
    if not missing:
        return None
    return (f"`{command}` needs the training extra, which this install lacks (no {', '.join(missing)}): "
            "pip install 'modelforge[train]' (from a checkout: pip install '.[train]')")


def usage() -> str:
    from modelforge.conf_folder import config_groups  # the standard library alone: no torch, no Hydra

    lines = [
        "usage: python -m modelforge <command> [key=value ...] [Hydra flags: --help, --cfg job, -m]",
        "",
        "commands:",
        *[f"  {name:<8} {help_text}" for name, help_text in COMMANDS.items()],
        "",
        "config groups (pick one with group=option, e.g. model=cnn optim=sgd):",
        *[f"  {group:<15} {', '.join(options)}" for group, options in config_groups().items()],
        "  hydra/launcher  joblib (parallel jobs here), slurm (a SLURM cluster): with -m",
        "",
        "model shortcuts at the top level: enc_sizes=[32,64] dec_sizes=[128] activation=gelu",
        "more: python -m modelforge <command> --help",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(usage())
        return 0
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        from modelforge.errors import closest_names

        guess = closest_names(name, COMMANDS)
        hint = f" (did you mean {guess[0]!r}?)" if guess else ""
        print(f"error: unknown command {name!r}{hint}; commands: {', '.join(COMMANDS)}", file=sys.stderr)
        return 2
    needed = missing_extra(name)
    if needed:
        print(f"error: {needed}", file=sys.stderr)
        return 2
    from modelforge.registry import load_builtins

    if name != "list":  # list loads the names alone (cli/listing.py)
        load_builtins()  # every built-in name, and their defaults in Hydra's ConfigStore, before any composition
    from modelforge.errors import ModelforgeError
    from modelforge.train import launch  # Lightning-free

    if name == "diff":  # reads records only: no Hydra app, no Lightning
        from modelforge.cli.run_diff import diff_main

        try:
            return diff_main(rest)
        except ModelforgeError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2

    # Started by torchrun or srun, each rank would do the whole job: rank 0 does it. (Ranks, not the launcher's
    # variables alone: an sbatch script that runs the command without srun is rank 0.)
    if name not in ("train", "eval") and launch.global_rank() > 0 and launch.started_together():
        print(f"`{name}` runs in one process: rank {launch.global_rank()} leaves it to rank 0", file=sys.stderr)
        return 0
    if name != "list":
        from modelforge.cli.app import run
        from modelforge.cli.commands import TASKS

        return run(TASKS[name], name, rest)
    from modelforge.cli.listing import list_names

    try:
        return list_names(rest)
    except ModelforgeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

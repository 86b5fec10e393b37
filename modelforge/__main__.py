"""``python -m modelforge <command> [overrides]``: thin dispatch to the commands."""

from __future__ import annotations

import sys
from collections.abc import Callable


# command -> (one-line help, runner). Runners import lazily so `list` never loads Lightning.
def _hydra_command(module: str, task: str, config_name: str) -> Callable[[list[str]], int]:
    def run(argv: list[str]) -> int:
        import importlib

        from modelforge.cli.hydra_app import run_hydra

        return run_hydra(getattr(importlib.import_module(module), task), config_name, argv, f"modelforge {config_name}")

    return run


def _list(argv: list[str]) -> int:
    from modelforge.cli.list_cmd import main
    from modelforge.errors import ModelforgeError

    try:
        return main(argv)
    except ModelforgeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


COMMANDS: dict[str, tuple[str, Callable[[list[str]], int]]] = {
    "train": ("train a model on MNIST (Hydra app; -m for sweeps)", _hydra_command("modelforge.cli.train_cmd", "train_task", "train")),
    "eval": ("evaluate a checkpoint: eval ckpt_path=RUN/checkpoints/last.ckpt", _hydra_command("modelforge.cli.eval_cmd", "eval_task", "eval")),
    "summary": ("print the model a config builds: layers, shapes, parameters", _hydra_command("modelforge.cli.summary_cmd", "summary_task", "summary")),
    "list": ("list registries and their names: list [REGISTRY] [GLOB]", _list),
}


def usage() -> str:
    from modelforge.config import config_groups

    lines = [
        "usage: python -m modelforge <command> [key=value ...] [Hydra flags: --help, --cfg job, -m]",
        "",
        "commands:",
        *[f"  {name:<8} {help_text}" for name, (help_text, _) in COMMANDS.items()],
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
    return COMMANDS[name][1](rest)


if __name__ == "__main__":
    sys.exit(main())

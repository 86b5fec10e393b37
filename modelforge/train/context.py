"""What a caller knows of a run beyond its config: how it was started, which keys were chosen, how errors name the
run directory and the model's files. The CLI makes one from Hydra's job and hands it in; from Python the defaults
hold. The library never asks Hydra for any of it, so ``train(cfg)`` does the same wherever it is called from."""

from __future__ import annotations

from dataclasses import dataclass

from modelforge.models.definitions import ModelFiles


@dataclass(frozen=True)
class RunContext:
    """How a run was started (the defaults: from Python, with every key of its config chosen)."""

    launched_from: str = "python"  # metrics.json's launched_from: "python" or "cli"
    overrides: tuple[str, ...] | None = None  # the command line's overrides; None: the config itself is the record
    dir_key: str = "run_dir"  # the key an error names for the run directory (``hydra.run.dir`` from the CLI)
    model_files: ModelFiles | None = None  # the model file and config folders: an error's file:line, the run's label
    writes_log: bool = True  # train() writes train.log itself; False where the caller's logging does (Hydra's job)
    claimed: bool = False  # the caller claimed the run directory for this run (the CLI does, before Hydra writes)

    def chosen(self, group: str) -> bool:
        """Whether ``group``'s option was chosen: by the config from Python, on the command line (``data=idx``)."""
        return self.overrides is None or any(_key(o) == group for o in self.overrides)

    def named_keys(self, group: str) -> set[str] | None:
        """The keys of ``group`` the command line named (``trainer.devices=2``); None from Python: every key counts."""
        if self.overrides is None:
            return None
        return {_key(o).split(".")[1] for o in self.overrides if _key(o).startswith(f"{group}.")}


def _key(override: str) -> str:
    return override.lstrip("+~").split("=", 1)[0]

"""Project errors: every user-facing failure says where, what, and what is allowed."""

from __future__ import annotations

import difflib
import functools
import re
import signal
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any


def closest_names(name: str, choices: Iterable[str], n: int = 1) -> list[str]:
    """Return up to ``n`` choices that look like ``name`` (for "did you mean")."""
    return list(_closest(str(name), tuple(str(c) for c in choices), n))


@functools.lru_cache(maxsize=4096)  # a graph asks of each plain word in its arguments whether it is a misspelt name
def _closest(name: str, choices: tuple[str, ...], n: int) -> tuple[str, ...]:
    return tuple(difflib.get_close_matches(name, choices, n=n, cutoff=0.6))


def closest_globs(pattern: str, names: Iterable[str], n: int = 1) -> list[str]:
    """What a glob over dotted ``names`` may have meant: a module path (``encoder.0``), the glob of its
    contents (``encoder.0.*``) or a name, whichever look most like ``pattern``."""
    names = [str(name) for name in names]
    modules = sorted({".".join(parts[:i]) for parts in (name.split(".") for name in names) for i in range(1, len(parts))})
    return closest_names(pattern, [*modules, *(f"{m}.*" for m in modules), *names], n=n)


def closest_paths(path: str | Path) -> list[str]:
    """What a path that does not exist may have meant: the entry of its folder (the nearest that exists) whose name
    looks most like the missing part, written as ``path`` was (``runs/mnsit`` -> ``runs/mnist``)."""
    given = Path(path).expanduser()
    parent, missing = given.parent, given.name
    while not parent.is_dir() and parent != parent.parent:
        parent, missing = parent.parent, parent.name
    try:
        names = [entry.name for entry in parent.iterdir()]
    except OSError:
        return []
    return [str(parent / name) for name in closest_names(missing, names)]


class ModelforgeError(Exception):
    """Base class of every error modelforge raises on purpose.

    The CLI prints these without a traceback; anything else is a bug.
    """


class ConfigError(ModelforgeError, ValueError):
    """A config value is wrong: at ``path`` (dotted, e.g. ``model.enc_sizes``), ``problem`` in words,
    what is ``allowed`` (a description or names), ``suggestions`` shown as "did you mean", and a
    ``hint`` of how to fix it when the rest is not enough."""

    def __init__(self, path: str, problem: str, *, allowed: str | Iterable[str] | None = None,
                 suggestions: Iterable[str] = (), hint: str | None = None) -> None:
        self.path, self.problem, self.hint = path, problem, hint
        self.allowed = allowed if isinstance(allowed, (str, type(None))) else list(allowed)
        self.suggestions = list(suggestions)
        lines = [f"{path}: {problem}" if path else problem]
        if self.suggestions:
            lines.append(f"  did you mean {' or '.join(repr(s) for s in self.suggestions)}?")
        if self.allowed is not None:
            lines.append(f"  allowed: {self.allowed if isinstance(self.allowed, str) else ', '.join(self.allowed)}")
        if hint:
            lines.append(f"  hint: {hint}")
        super().__init__("\n".join(lines))


class UnknownNameError(ConfigError):
    """A name was looked up in a registry (or a list of choices) that does not hold it."""

    def __init__(self, kind: str, name: object, choices: Iterable[str], *, path: str = "") -> None:
        self.kind, self.name = kind, name
        names = sorted(str(c) for c in choices)
        super().__init__(path, f"unknown {kind} {name!r}", allowed=names, suggestions=closest_names(str(name), names))


class UnknownKeyError(ConfigError):
    """The one error for a key that is not one of ``allowed``: at ``path`` (the key's own), ``problem`` in words
    (``optim Adam has no option 'lrr'``), the names allowed (``none`` when there are none) and the closest one.
    ``hint`` may be a function of the closest names (``[]`` when none is close)."""

    def __init__(self, path: str, key: object, problem: str, allowed: Iterable[object], *,
                 none: str | None = "no options", hint: str | Callable[[list[str]], str | None] | None = None) -> None:
        self.key = key
        names = [str(name) for name in allowed]
        guess = closest_names(str(key), names)
        super().__init__(path, problem, allowed=names or none, suggestions=guess,
                         hint=hint(guess) if callable(hint) else hint)


class DataError(ModelforgeError):
    """A dataset file is missing, truncated, corrupt, or could not be fetched."""


class CheckpointError(ModelforgeError):
    """A checkpoint is missing, unreadable, or does not fit the model asked for."""


class ExportError(ModelforgeError):
    """A model cannot be exported in a format (exit 2), or its exported file does not compute what the
    model computes (``exit_code=1``: the parity check failed)."""

    def __init__(self, message: str, *, exit_code: int = 2) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class ResourceError(ModelforgeError):
    """The model asked for more memory than this machine can give."""

    exit_code = 1


def is_allocation_failure(exc: BaseException) -> bool:
    import torch

    text = str(exc)
    return isinstance(exc, torch.OutOfMemoryError) or (
        isinstance(exc, RuntimeError) and ("can't allocate memory" in text or "out of memory" in text.lower()))


def allocation_error(exc: BaseException, model_cfg: Mapping[str, Any] | None, while_doing: str) -> ResourceError:
    """A :class:`ResourceError` naming the model config and the size asked for."""
    text, cfg = str(exc), dict(model_cfg or {})
    cpu = re.search(r"tried to allocate (\d+) bytes", text)
    cuda = re.search(r"Tried to allocate ([\d.]+ [KMGT]?i?B)", text)
    size = (f"{int(cpu.group(1)) / 1e9:,.1f} GB in one block" if cpu else f"{cuda.group(1)} more on the GPU" if cuda
            else "more memory than is free")
    where = "on the GPU" if "CUDA" in text or "cuda" in text else "in RAM"
    keys = ("enc_sizes", "dec_sizes", "hidden_sizes", "activation")
    model = " ".join([f"model={cfg.get('name')}", *(f"{k}={cfg[k]}" for k in keys if cfg.get(k) is not None)])
    return ResourceError(f"out of memory {while_doing}: {model} asked for {size} ({where}). "
                         "Choose smaller enc_sizes/dec_sizes, a smaller data.batch_size, "
                         "or bf16-mixed precision on a GPU")


@contextmanager
def allocation_errors(model_cfg: Mapping[str, Any] | None, while_doing: str) -> Iterator[None]:
    """Turn an allocation failure inside the block into one :class:`ResourceError`."""
    try:
        yield
    except (RuntimeError, MemoryError) as exc:
        if not (isinstance(exc, MemoryError) or is_allocation_failure(exc)):
            raise
        raise allocation_error(exc, model_cfg, while_doing) from None


class RunStopped(Exception):
    """Training stopped before its end for a reason the user should see in one message.

    ``exit_code`` is what the CLI reports (bad input exits 2; any other failure 1). A terminated or
    interrupted job also ends a sweep; a diverged one fails that job only.
    """

    status = "failed"
    exit_code = 1
    ends_sweep = False
    resume_with: str | None = None  # "ckpt_path=..." once the run's checkpoint is known

    def __str__(self) -> str:
        text = super().__str__()
        return f"{text}\n  hint: resume with {self.resume_with}" if self.resume_with else text


class Terminated(RunStopped):
    """A signal asked the run to stop (a cluster preempting it, ``kill``, ``timeout``)."""

    status = "terminated"
    ends_sweep = True

    def __init__(self, signum: int, during: str = "") -> None:
        self.signum = int(signum)
        self.exit_code = 128 + self.signum
        super().__init__(f"stopped by {signal.Signals(self.signum).name}{f' {during}' if during else ''}")


class Interrupted(RunStopped):
    """Ctrl-C."""

    status = "interrupted"
    exit_code = 128 + signal.SIGINT
    ends_sweep = True

    def __init__(self, during: str = "") -> None:
        super().__init__(f"stopped by Ctrl-C (SIGINT){f' {during}' if during else ''}")


class Diverged(RunStopped):
    """The training loss stopped being a number, or left the bound set for it."""

    status = "diverged"
    exit_code = 3

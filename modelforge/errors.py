"""Project errors: every user-facing failure says where, what, and what is allowed."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def closest_names(name: str, choices: Iterable[str], n: int = 1) -> list[str]:
    """Return up to ``n`` choices that look like ``name`` (for "did you mean")."""
    return difflib.get_close_matches(str(name), [str(c) for c in choices], n=n, cutoff=0.6)


class ModelforgeError(Exception):
    """Base class of every error modelforge raises on purpose.

    The CLI prints these without a traceback; anything else is a bug.
    """


class ConfigError(ModelforgeError, ValueError):
    """A config value is wrong.

    Args:
        path: dotted config path of the bad value, e.g. ``model.enc_sizes``.
        problem: what is wrong, in words.
        allowed: what would be accepted (a description or list of names).
        suggestions: closest valid names, shown as "did you mean".
        hint: how to fix it, when the above is not enough.
    """

    def __init__(
        self,
        path: str,
        problem: str,
        *,
        allowed: str | Iterable[str] | None = None,
        suggestions: Iterable[str] = (),
        hint: str | None = None,
    ) -> None:
        self.path = path
        self.problem = problem
        self.allowed = allowed if isinstance(allowed, (str, type(None))) else list(allowed)
        self.suggestions = list(suggestions)
        self.hint = hint
        super().__init__(self._format())

    def _format(self) -> str:
        where = f"{self.path}: " if self.path else ""
        lines = [f"{where}{self.problem}"]
        if self.suggestions:
            quoted = " or ".join(repr(s) for s in self.suggestions)
            lines.append(f"  did you mean {quoted}?")
        if self.allowed is not None:
            allowed = self.allowed if isinstance(self.allowed, str) else ", ".join(self.allowed)
            lines.append(f"  allowed: {allowed}")
        if self.hint:
            lines.append(f"  hint: {self.hint}")
        return "\n".join(lines)


class UnknownNameError(ConfigError):
    """A name was looked up in a registry (or a list of choices) that does not hold it."""

    def __init__(self, kind: str, name: object, choices: Iterable[str], *, path: str = "") -> None:
        names = sorted(str(c) for c in choices)
        self.kind = kind
        self.name = name
        super().__init__(
            path,
            f"unknown {kind} {name!r}",
            allowed=names,
            suggestions=closest_names(str(name), names),
        )


class DataError(ModelforgeError):
    """A dataset file is missing, truncated, corrupt, or could not be fetched."""


class CheckpointError(ModelforgeError):
    """A checkpoint is missing, unreadable, or does not fit the model asked for."""

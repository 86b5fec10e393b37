"""Why a training run stopped early, with the exit code the CLI reports for each reason.

| status        | cause                                   | exit code        |
|---------------|-----------------------------------------|------------------|
| `terminated`  | SIGTERM (143), SIGUSR1 (138)            | 128 + signal     |
| `interrupted` | Ctrl-C (SIGINT)                         | 130              |
| `diverged`    | non-finite loss, or above `max_loss`    | 3                |

(Bad input exits 2; any other failure 1.) A terminated or interrupted job also ends a sweep;
a diverged one is a failed job of the sweep, which goes on.
"""

from __future__ import annotations

import signal

EXIT_DIVERGED = 3


class RunStopped(Exception):
    """Training stopped before its end for a reason the user should see in one message."""

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

    def __init__(self, signum: int) -> None:
        self.signum = int(signum)
        self.exit_code = 128 + self.signum
        super().__init__(f"stopped by {signal.Signals(self.signum).name}")


class Interrupted(RunStopped):
    """Ctrl-C."""

    status = "interrupted"
    exit_code = 128 + signal.SIGINT
    ends_sweep = True

    def __init__(self) -> None:
        super().__init__("stopped by Ctrl-C (SIGINT)")


class Diverged(RunStopped):
    """The training loss stopped being a number, or left the bound set for it."""

    status = "diverged"
    exit_code = EXIT_DIVERGED

"""Check `group=option` overrides against conf/ before Hydra composes, for a did-you-mean error.

Hydra's own message for a missing option ("Could not load 'hooks/verbos'") does not
always list the choices; this one names the group, the bad option and the closest.
"""

from __future__ import annotations

import re

from modelforge.errors import UnknownNameError
from modelforge.paths import config_groups

# Sweep functions (glob(...), choice(...), range(...)) and interpolations are Hydra's to expand.
SWEEP_EXPRESSION = re.compile(r"[()$*?]")


def check_group_choices(argv: list[str]) -> None:
    """Raise UnknownNameError for an override that picks an option its config group lacks."""
    groups = config_groups()
    for arg in argv:
        if arg.startswith(("-", "~")) or "=" not in arg:
            continue
        key, value = arg.lstrip("+").split("=", 1)
        if key not in groups or not value or SWEEP_EXPRESSION.search(value) or value == "null":
            continue
        for option in (v.strip() for v in value.strip("[]").split(",")):
            if option and option not in groups[key]:
                raise UnknownNameError(f"{key} option", option, groups[key], path=key)

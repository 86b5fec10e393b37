"""``train --help`` lists the config groups a user picks from, not the generated ``*_defaults`` ones."""

from __future__ import annotations

import re
from pathlib import Path

from modelforge.config import config_groups


def test_help_lists_every_user_group_and_no_internal_one(run_main, tmp_path: Path) -> None:
    result = run_main("train", "--help", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    listed = dict(re.findall(r"^([\w/]+): (.+)$", result.stdout.split("== Config ==")[0], re.MULTILINE))
    assert "_defaults" not in result.stdout
    assert {group: options.split(", ") for group, options in listed.items()} == config_groups()
    assert "trainer:" in result.stdout.split("== Config ==")[1]  # the composed config follows

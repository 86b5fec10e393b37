"""torchvision is optional: without it, the modules that compare the zoo with it skip, none is a collection error
(issue 46: test_torchvision_weights.py imported a helper from a test module that skipped itself)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import REPO, child_env

MODULES = ["tests/models/test_torchvision_parity.py", "tests/weights/test_torchvision_weights.py",
           "tests/models/test_features.py", "tests/models/test_swin_parity.py"]

# A pytest run of MODULES in a process where torchvision cannot be imported and no folder beside the environment
# holds it (tests/helpers/parity.py looks there).
WITHOUT_TORCHVISION = f"""
import sys
from pathlib import Path
sys.modules["torchvision"] = None
import tests.helpers.parity as parity
parity.TORCHVISION_BESIDE = Path("/nonexistent")
import pytest
sys.exit(pytest.main(["-n", "0", "-p", "no:cacheprovider", "-q", "-rs", *{MODULES!r}]))
"""


@pytest.mark.e2e
def test_the_torchvision_modules_skip_without_torchvision() -> None:
    result = subprocess.run([sys.executable, "-c", WITHOUT_TORCHVISION], cwd=REPO, env=child_env(),
                            capture_output=True, text=True, timeout=600)
    # 5, pytest's "no tests collected": each module skipped whole (a collection error would be 2)
    assert result.returncode == pytest.ExitCode.NO_TESTS_COLLECTED, result.stdout[-3000:] + result.stderr[-3000:]
    assert f"{len(MODULES)} skipped" in result.stdout and "ERROR" not in result.stdout
    assert "torchvision is not installed" in result.stdout

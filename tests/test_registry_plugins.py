"""The registry tests pass with a plugin installed: a real dist-info with entry points on sys.path."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# Names chosen to break tests that pin registry contents: a glob match for "con*", a name next
# to "gelu", no docstrings, an initializer that changes nothing.
PLUGIN = textwrap.dedent("""
    import os, pathlib
    from torch import nn
    from modelforge.registry import ACTIVATIONS, BLOCKS, INITIALIZERS, MODELS

    class Square(nn.Module):
        def forward(self, x):
            return (x * x).sum(dim=-1)

    ACTIVATIONS.add("square", Square)
    ACTIVATIONS.add("gelu_plugin", nn.GELU)
    BLOCKS.add("conv_plugin", nn.Identity)
    MODELS.add("cnn_plugin", lambda width: nn.Linear(width, 2))
    INITIALIZERS.add("keep_plugin", lambda: (lambda t: t))
    pathlib.Path(os.environ["MF_PLUGIN_MARKER"]).write_text("loaded")
""")


@pytest.mark.e2e
def test_registry_tests_pass_with_a_plugin_installed(tmp_path: Path) -> None:
    (tmp_path / "mf_test_plugin.py").write_text(PLUGIN)
    dist = tmp_path / "mf_test_plugin-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: mf-test-plugin\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[modelforge.plugins]\nmf_test = mf_test_plugin\n")
    marker = tmp_path / "marker"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(REPO)]), "MF_PLUGIN_MARKER": str(marker)}
    result = subprocess.run(
        # -n 0: in one process, not the default run's xdist workers (each would import torch again).
        [sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider", "tests/test_registry.py",
         "tests/layers/test_activations.py", "tests/layers/test_initializers.py"],
        env=env, cwd=REPO, capture_output=True, text=True,
    )
    # The plugin was really installed and loaded (test_registry.py's entry-point test then checks
    # its names are marked as the plugin's).
    assert marker.read_text() == "loaded"
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]

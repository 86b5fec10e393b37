"""Another package adds names through the `modelforge.plugins` entry point group."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest


@pytest.mark.e2e
def test_entry_point_plugin_registers_a_name_usable_from_yaml(tmp_path: Path) -> None:
    # A real installed distribution: a dist-info with entry_points.txt on sys.path.
    (tmp_path / "my_acts.py").write_text(textwrap.dedent("""
        from torch import nn
        from modelforge.registry import ACTIVATIONS

        class Square(nn.Module):
            '''x squared, from a plugin package.'''
            def forward(self, x):
                return x * x

        ACTIVATIONS.add("square", Square)
    """))
    dist = tmp_path / "my_acts-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: my-acts\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[modelforge.plugins]\nsquare = my_acts\n")
    yaml_cfg = tmp_path / "model.yaml"
    yaml_cfg.write_text("name: mlp\nhidden_sizes: [8]\nactivation: square\n")
    code = textwrap.dedent(f"""
        import sys; sys.path.insert(0, {str(tmp_path)!r})
        import modelforge
        model = modelforge.build_model({str(yaml_cfg)!r})
        assert type(model.hidden[0].act).__name__ == "Square", model
        assert "square" in modelforge.ACTIVATIONS.names()
    """)
    subprocess.run([sys.executable, "-c", code], check=True)

"""A user's own project, outside the checkout: its configs (--config-dir) and an installed plugin package.

The project is the one the README's "Your own models and configs" walks through. The
plugin package is installed the way pip leaves it (a dist-info with entry_points.txt
on the path), so modelforge finds it through the real `modelforge.plugins` entry point.
"""

from __future__ import annotations

import os
import re
import textwrap
from pathlib import Path

import pytest

from tests.conftest import REPO, run_cli
from tests.helpers.mnist_idx import write_mnist_idx

pytestmark = pytest.mark.e2e  # a user project: its own process, its own PYTHONPATH and entry points

PLUGIN = '''
"""A block and an activation for modelforge, registered on import."""
from torch import nn

from modelforge import ACTIVATIONS, BLOCKS
from modelforge.layers.activations import make_activation


@ACTIVATIONS.register("square")
class Square(nn.Module):
    """x squared."""

    def forward(self, x):
        return x * x


@BLOCKS.register("residual_conv")
class ResidualConv(nn.Module):
    """act(x + conv3x3(x)): keeps the shape; in_channels is inferred in a graph."""

    def __init__(self, in_channels: int, activation: str = "relu"):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, in_channels, 3, padding=1)
        self.act = make_activation(activation)

    def forward(self, x):
        return self.act(x + self.conv(x))
'''

MY_MODEL = """\
name: graph
output: head
nodes:
  stem: {block: conv, args: {out_channels: 8, activation: square}, inputs: [input]}
  res:  {block: residual_conv}
  down: {block: conv, args: {out_channels: 16, pool: max}}
  gap:  {block: global_avg_pool}
  flat: {block: flatten}
  head: {block: linear, args: {out_features: 10, activation: null}}
"""

QUICK = """\
# @package _global_
defaults:
  - override /model: my_model
trainer:
  max_epochs: 1
"""


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("my_project")
    (root / "configs" / "model").mkdir(parents=True)
    (root / "configs" / "experiment").mkdir()
    (root / "configs" / "model" / "my_model.yaml").write_text(MY_MODEL)
    (root / "configs" / "experiment" / "quick.yaml").write_text(QUICK)
    site = root / "site"
    (site / "my_blocks").mkdir(parents=True)
    (site / "my_blocks" / "__init__.py").write_text(textwrap.dedent(PLUGIN))
    dist = site / "my_blocks-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: my-blocks\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[modelforge.plugins]\nmy_blocks = my_blocks\n")
    write_mnist_idx(root / "mnist", n_train=96, n_test=32)
    return root


def _env(project: Path) -> dict[str, str]:
    return {"PYTHONPATH": os.pathsep.join([str(project / "site"), str(REPO)]),
            "MODELFORGE_DATA": str(project / "mnist")}


def test_summary_of_the_users_model_with_the_plugin_block(project: Path) -> None:
    result = run_cli("summary", "--config-dir", "configs", "model=my_model", cwd=project, env=_env(project))
    assert result.returncode == 0, result.stderr
    assert re.search(r"nodes\.res\s+ResidualConv\s+\[2, 8, 28, 28\]\s+584", result.stdout), result.stdout
    assert "act=square" in result.stdout


@pytest.mark.slow  # 16 s: two trainings; tests/test_readme_commands.py composes both commands by default
def test_model_file_path_and_an_own_experiment_train(project: Path) -> None:
    tiny = ["data.val_size=32", "data.verify=false", "trainer.accelerator=cpu", "trainer.enable_progress_bar=false"]
    by_path = run_cli("summary", "model=configs/model/my_model.yaml", cwd=project, env=_env(project))
    assert by_path.returncode == 0, by_path.stderr
    assert "ResidualConv" in by_path.stdout
    trained = run_cli("train", "--config-dir", "configs", "experiment=quick", "trainer.limit_train_batches=2",
                      "trainer.limit_val_batches=1", "trainer.limit_test_batches=1", *tiny, "hydra.run.dir=run",
                      cwd=project, env=_env(project))
    assert trained.returncode == 0, trained.stderr[-2000:]
    stored = (project / "run" / "config.yaml").read_text()
    assert "block: residual_conv" in stored and "max_epochs: 1" in stored

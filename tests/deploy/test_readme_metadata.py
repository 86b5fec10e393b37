"""The block of docs/deploy.md that reads an export's metadata with plain torch and onnxruntime runs as written (RUN
pointing at a real run), without modelforge, and reads what modelforge wrote."""

from __future__ import annotations

import importlib.util
import json
import re
import warnings
from pathlib import Path

import pytest

from modelforge.deploy.export import export
from modelforge.deploy.metadata import read_metadata
from modelforge.train import train
from tests.conftest import REPO
from tests.helpers.mnist_idx import write_mnist_idx
from tests.helpers.run_config import compose_train


def readme_block(marker: str) -> str:
    """The ```python block of docs/deploy.md (the README's section until the docs site) that holds ``marker``."""
    blocks = re.findall(r"```python\n(.*?)```", (REPO / "docs" / "deploy.md").read_text(), re.S)
    found = [block for block in blocks if marker in block]
    assert len(found) == 1, f"{len(found)} python blocks of docs/deploy.md hold {marker!r}"
    return found[0]


@pytest.mark.skipif(not importlib.util.find_spec("onnxruntime"), reason="onnxruntime not installed")
def test_the_readme_reads_an_exports_metadata_with_plain_torch_and_onnxruntime(tmp_path: Path, monkeypatch) -> None:
    data, run = tmp_path / "data", tmp_path / "RUN"
    write_mnist_idx(data, n_train=64, n_test=16)
    train(compose_train(data, "trainer.max_epochs=1", "model=mlp", "model.hidden_sizes=[8]"), run_dir=run)
    for format in ("pt2", "torchscript", "onnx"):
        export(run, format, check=False)
    code = readme_block('extra_files=extra')
    assert "import modelforge" not in code and "from modelforge" not in code
    monkeypatch.chdir(tmp_path)  # RUN/checkpoints/... as the README writes it
    scope: dict = {}
    with warnings.catch_warnings():  # torch's own notice, drawn by the README's torch.jit.load: the user's to see
        warnings.filterwarnings("ignore", message=r".*torch\.jit\.load. is deprecated", category=DeprecationWarning)
        exec(compile(code, "docs/deploy.md", "exec"), scope)  # noqa: S102 - the README's own code, run as written
    written = read_metadata(run / "checkpoints" / "last.onnx")
    assert scope["meta"] == written  # the ONNX file's, read last
    assert written["normalize"] == {"mean": [0.1307], "std": [0.3081]} and written["input_shape"] == [1, 28, 28]
    assert json.loads(scope["extra"]["modelforge.json"]) == read_metadata(run / "checkpoints" / "last.pt") == written
    assert {type(scope["program"]).__name__, type(scope["module"]).__name__} == {"ExportedProgram", "RecursiveScriptModule"}

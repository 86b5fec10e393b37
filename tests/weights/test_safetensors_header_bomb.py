"""A .safetensors header that declares far more than the file can be weights of (a sparse file made with truncate):
refused from its header before anything is mapped, with one line, and a train run leaves no run directory; integer
or bool tensors are refused, not cast into float weights without a word."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from modelforge import CheckpointError, build_model
from modelforge.train.transfer import load_init_weights
from tests.conftest import run_cli


def sparse_safetensors(path: Path, values: int) -> Path:
    """A valid .safetensors file of one float32 tensor of ``values`` values, all of it a hole (no disk used)."""
    header = json.dumps({"fc.weight": {"dtype": "F32", "shape": [values], "data_offsets": [0, 4 * values]}}).encode()
    header += b" " * (-len(header) % 8)
    path.write_bytes(len(header).to_bytes(8, "little") + header)
    os.truncate(path, 8 + len(header) + 4 * values)
    return path


def test_a_40_gb_tensor_in_init_from_is_one_line_and_no_run_directory(tiny_data: Path, tmp_path: Path) -> None:
    bomb = sparse_safetensors(tmp_path / "bomb.safetensors", 10_000_000_000)  # 40 GB declared
    run_dir = tmp_path / "run"
    result = run_cli("train", f"init.from={bomb}", f"data.data_dir={tiny_data}", "trainer.max_epochs=1",
                     f"hydra.run.dir={run_dir}", env={"MODELFORGE_DATA": str(tiny_data)})
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: init.from: {bomb} declares ")
    assert "refused before reading" in lines[0]
    assert not run_dir.exists()


def test_a_tensor_larger_than_the_whole_model_is_refused_from_the_header(tmp_path: Path) -> None:
    file = sparse_safetensors(tmp_path / "two_gb.safetensors", 500_000_000)  # 2 GB: fits memory, not the model
    model = build_model({"name": "mlp", "hidden_sizes": [3]})
    with pytest.raises(CheckpointError, match=r"declares fc.weight of shape \[500000000\] \(500,000,000 values, 2.0 GB\), "
                       r"more than this whole model's 2,395: not weights of this model; refused before reading"):
        load_init_weights(model, file)


@pytest.mark.parametrize("dtype", [torch.int32, torch.bool])
def test_integer_or_bool_tensors_are_not_cast_into_float_weights(dtype: torch.dtype, tmp_path: Path) -> None:
    model = build_model({"name": "mlp", "hidden_sizes": [3]})
    state = {name: (t * 0).to(dtype) for name, t in model.state_dict().items()}
    file = tmp_path / "ints.safetensors"
    save_file(state, str(file))
    before = {name: t.clone() for name, t in model.state_dict().items()}
    with pytest.raises(CheckpointError, match=rf"^init.from: {file}: .* is {dtype} for the model's torch.float32.*"
                       "refused$"):
        load_init_weights(model, file)
    assert all(before[name].equal(t) for name, t in model.state_dict().items())  # nothing copied

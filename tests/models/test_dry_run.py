"""Building at the cost of a constructor (issue 39.3): a graph's shapes come from an empty batch, without
arithmetic and whatever the input size, each block is made once with its init, and sizes are capped before
anything is allocated (issue 38: memory bombs)."""

from __future__ import annotations

import resource
import sys
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from torch import Tensor, nn
from torch.overrides import TorchFunctionMode

from modelforge import ConfigError, build_model, create_model
from modelforge.registry import BLOCKS


def graph(nodes: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"name": "graph", "in_channels": 1, "input_size": [8, 8], "nodes": nodes, **extra}


class _Counted(TorchFunctionMode):
    """Counts the elements of the tensors torch functions return while a model is built."""

    def __init__(self) -> None:
        super().__init__()
        self.largest = 0

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        out = func(*args, **(kwargs or {}))
        if isinstance(out, Tensor) and not isinstance(out, nn.Parameter):
            self.largest = max(self.largest, out.numel())
        return out


def test_building_runs_no_arithmetic_at_the_input_size() -> None:
    """At 4096x4096 one activation of resnet50's stem is 2 x 64 x 2048 x 2048 values (2 GB): the build makes
    none of them, only the weights."""
    with _Counted() as counted:
        model = create_model("resnet50", ["in_channels=3", "input_size=[4096,4096]"])
    assert counted.largest == max(p.numel() for p in model.parameters()) == 512 * 512 * 9  # layer4's 3x3 convs
    assert model.nodes.fc.in_features == 2048 and model.output_shape == (10,)


def test_same_seed_same_weights_and_init_drawn_once_per_block() -> None:
    a, b = create_model("resnet18", seed=5).state_dict(), create_model("resnet18", seed=5).state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    c = create_model("resnet18", seed=6).state_dict()
    assert not torch.equal(a["nodes.stem.conv.weight"], c["nodes.stem.conv.weight"])
    # the init rule (He, fan_out) drew the stem's weight: its spread is He's, not PyTorch's default
    assert a["nodes.stem.conv.weight"].std().item() == pytest.approx((2 / (64 * 9)) ** 0.5, rel=0.15)


class _RefusesEmptyBatch(nn.Module):
    """A block whose forward reads a value: it cannot run on an empty batch."""

    def forward(self, x: Tensor) -> Tensor:
        if x.shape[0] == 0:
            raise RuntimeError("no sample to read")
        return x * float(x.abs().max() >= 0)


@pytest.fixture
def refuses_empty_batch() -> Iterator[None]:
    """The block registered for one test only: a name left behind would show in every listing of the registry."""
    BLOCKS.add("test_refuses_empty_batch", _RefusesEmptyBatch)
    yield
    BLOCKS._entries.pop("test_refuses_empty_batch")


@pytest.mark.usefixtures("refuses_empty_batch")
def test_a_block_that_refuses_an_empty_batch_still_builds() -> None:
    model = build_model(graph({"odd": {"block": "test_refuses_empty_batch"}, "flat": {"block": "flatten"},
                               "head": {"block": "nn.Linear", "args": {"out_features": 3}}}))
    assert model.nodes.head.in_features == 64
    assert model(torch.ones(4, 1, 8, 8)).shape == (4, 3)


def test_an_error_shows_the_batch_as_two_and_torchs_own_message() -> None:
    with pytest.raises(ConfigError) as caught:
        build_model(graph({"conv": {"block": "nn.Conv2d", "args": {"out_channels": 4, "kernel_size": 3}},
                           "lin": {"block": "nn.Linear", "args": {"in_features": 5, "out_features": 2}}}))
    assert str(caught.value) == ("model.nodes.lin: node 'lin' (nn.Linear) does not fit its input conv [2, 4, 6, 6]: "
                                 "mat1 and mat2 shapes cannot be multiplied (48x6 and 5x2)")


@pytest.mark.parametrize(("nodes", "where", "largest"), [
    ({"p": {"block": "parameter", "args": {"shape": [100000, 100000]}, "inputs": []}},
     "model.nodes.p", "weight [100000, 100000]"),
    ({"flat": {"block": "flatten"}, "fc": {"block": "nn.Linear", "args": {"out_features": 100_000_000}}},
     "model.nodes.fc", "weight [100000000, 64]"),
])
def test_a_block_too_large_is_refused_before_it_is_allocated(nodes: dict, where: str, largest: str) -> None:
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(ConfigError) as caught:
        build_model(graph(nodes))
    first, hint = str(caught.value).splitlines()
    assert first.startswith(f"{where}: the model would hold ")
    assert f"more than model.max_params (1,000,000,000); the largest is {largest}" in first
    assert hint.startswith("  hint: set model.max_params=")
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 500_000  # KB: nothing was allocated


def test_max_params_is_the_cap_and_can_be_raised() -> None:
    nodes = {"flat": {"block": "flatten"}, "fc": {"block": "nn.Linear", "args": {"out_features": 100}}}
    with pytest.raises(ConfigError, match=r"model.nodes.fc: the model would hold 6,500 parameters and buffers .* more "
                                          r"than model.max_params \(1,000\)"):
        build_model(graph(nodes, max_params=1000))
    assert sum(p.numel() for p in build_model(graph(nodes, max_params=6500)).parameters()) == 6500
    with pytest.raises(ConfigError, match=r"model.max_params: must be positive, got 0"):
        build_model(graph(nodes, max_params=0))


def test_a_cnn_too_large_is_refused_before_it_is_built() -> None:
    with pytest.raises(ConfigError, match=r"^model: the model would hold 2,510,200,001,419 parameters and buffers "
                                          r"\(10.0 TB as float32\), more than model.max_params \(1,000,000,000\); the "
                                          r"largest is decoder.0.linear.weight \[128, 19600000000\]"):
        build_model({"name": "cnn", "enc_sizes": [100_000_000]})
    assert build_model({"name": "mlp", "max_params": 300_000}).output_shape == (10,)


@pytest.mark.e2e
def test_train_refuses_a_memory_bomb_in_one_line_under_1_gb(tmp_path: Any) -> None:
    """The command runs in a process of its own whose peak memory its parent reads (RUSAGE_CHILDREN)."""
    import json
    import os
    import subprocess

    from tests.conftest import REPO

    command = [sys.executable, "-m", "modelforge", "train", "enc_sizes=[100000000]", "trainer.fast_dev_run=true",
               f"hydra.run.dir={tmp_path / 'run'}"]
    parent = ("import json, resource, subprocess, sys; r = subprocess.run(sys.argv[1:], capture_output=True, text=True); "
              "print(json.dumps([r.returncode, r.stderr, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss]))")
    env = {**os.environ, "HYDRA_FULL_ERROR": "0"}
    out = subprocess.run([sys.executable, "-c", parent, *command], cwd=REPO, env=env, capture_output=True, text=True,
                         timeout=300)
    returncode, stderr, peak_kb = json.loads(out.stdout)
    assert returncode == 2, stderr
    assert stderr.splitlines()[0].startswith(
        "error: model: the model would hold 2,510,200,001,419 parameters and buffers (10.0 TB as float32), more than "
        "model.max_params (1,000,000,000)")
    assert "Traceback" not in stderr and not (tmp_path / "run").exists()
    assert peak_kb < 1_000_000  # KB (Linux)


@pytest.mark.parametrize("make", [
    lambda: nn.Conv2d(3, 5, 3), lambda: nn.Conv2d(3, 6, (3, 5), stride=(2, 3), padding=(1, 2), dilation=2, groups=3),
    lambda: nn.Conv1d(4, 2, 5, stride=2), lambda: nn.Conv3d(2, 2, 3, padding=1), lambda: nn.Conv2d(3, 4, 3, padding="same"),
    lambda: nn.Conv2d(3, 4, 3, padding=1, padding_mode="reflect"), lambda: nn.BatchNorm2d(3), lambda: nn.BatchNorm1d(3),
    lambda: nn.Linear(9, 4), lambda: nn.Hardswish(), lambda: nn.Dropout(0.5)])
def test_shape_rules_give_what_the_layers_give(make: Any) -> None:
    """The dry run computes a plain layer's output shape by torch's formula (no kernel set up): the shapes the
    layer gives, and no rule where the input does not fit (the layer runs and raises)."""
    from modelforge.models.graph_dry_run import output_by_rule

    block = make().eval()
    for shape in ([0, 3, 9], [0, 3, 9, 9], [0, 3, 12, 10], [0, 4, 9, 9, 9], [0, 2, 7, 7, 7], [0, 9], [0, 2, 9]):
        x = torch.zeros(shape)
        by_rule = output_by_rule(block, x)
        try:
            with torch.no_grad():
                expected = block(x).shape
        except (RuntimeError, ValueError):
            assert by_rule is None, (block, shape)
            continue
        assert by_rule is None or by_rule.shape == expected, (block, shape, by_rule.shape, expected)


@pytest.mark.parametrize("cfg", [
    {"name": "cnn"}, {"name": "seed_cnn"}, {"name": "cnn", "norm": False, "activation": "prelu", "n_classes": None},
    {"name": "cnn", "enc_sizes": [8, 16, 32], "dec_sizes": [], "pool": None, "kernel_size": 5, "input_size": [20, 24]},
    {"name": "mlp"}, {"name": "mlp", "norm": True, "hidden_sizes": [7], "activation": "prelu", "n_classes": None}])
def test_cnn_and_mlp_count_their_size_before_they_are_made(cfg: dict[str, Any]) -> None:
    """What the config check counts (to refuse a model above max_params) is what the model holds."""
    from modelforge.build import validate_model_config
    from modelforge.models import cnn, mlp

    checked = validate_model_config(cfg)
    counted = (mlp if cfg["name"] == "mlp" else cnn)._tensor_shapes(checked)
    model = build_model(cfg)
    held = {name: list(t.shape) for name, t in [*model.named_parameters(), *model.named_buffers()]}
    assert dict(counted) == held

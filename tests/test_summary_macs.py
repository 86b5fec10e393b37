"""Multiply-accumulates: count_macs and the summary's MACs column against a hand count."""

from __future__ import annotations

import re
from copy import deepcopy as copy_module
from pathlib import Path

import pytest
import torch
from torch import nn

from modelforge import build_model, create_model
from modelforge.config import conf_dir
from modelforge.inspect.flops import (
    _countable,
    count_macs,
    format_macs,
    forward_macs,
    macs_by_module,
)
from modelforge.inspect.summary import describe_model, format_summary, summarize
from modelforge.layers.blocks import ConvBlock, LinearBlock

# The default cnn, by hand (per sample; a conv output pixel costs k*k*c_in MACs per output channel):
CONV1 = 28 * 28 * 32 * (3 * 3 * 1)       # 1 -> 32, 3x3, padding 1, on 28x28; then 2x2 max pool -> 14x14
CONV2 = 14 * 14 * 64 * (3 * 3 * 32)      # 32 -> 64 on 14x14; pool -> 7x7
FC1 = (64 * 7 * 7) * 128                 # flatten 3136 -> 128
HEAD = 128 * 10
HAND_COUNT = CONV1 + CONV2 + FC1 + HEAD  # 4,241,152; BatchNorm, ReLU, pooling and biases count 0


def test_the_default_cnn_matches_the_hand_count() -> None:
    model = build_model({"name": "cnn"})
    total, per_layer = count_macs(model, model.input_shape)
    assert abs(total - HAND_COUNT) <= 0.01 * HAND_COUNT
    assert total == HAND_COUNT  # and in fact exactly
    assert per_layer["encoder.0.conv"] == CONV1 and per_layer["encoder.1.conv"] == CONV2
    assert per_layer["decoder.0.linear"] == FC1 and per_layer["head"] == HEAD
    assert per_layer["encoder.0.norm"] == per_layer["encoder.0.act"] == per_layer["encoder.0.pool"] == 0
    assert per_layer["encoder"] == CONV1 + CONV2  # a parent counts its children
    assert "" not in per_layer and set(per_layer) == {n for n, _ in model.named_modules() if n}


def test_per_sample_whatever_the_batch_and_the_mode_is_restored() -> None:
    model = build_model({"name": "cnn", "enc_sizes": [8]}).train()
    assert count_macs(model, model.input_shape, batch_size=4)[0] == count_macs(model, model.input_shape)[0]
    assert model.training


def test_any_module_and_a_graph_model() -> None:
    mlp = nn.Sequential(nn.Flatten(), nn.Linear(12, 5), nn.ReLU(), nn.Linear(5, 2))
    assert count_macs(mlp, (3, 4)) == (12 * 5 + 5 * 2, {"0": 0, "1": 60, "2": 0, "3": 10})
    graph = build_model(conf_dir() / "model" / "graph.yaml", seed=0)
    total, per_layer = count_macs(graph, graph.input_shape)
    convs = [n for n, m in graph.named_modules() if isinstance(m, (nn.Conv2d, nn.Linear))]
    assert total == sum(per_layer[n] for n in convs) > 0


def test_summary_rows_and_table_show_the_macs() -> None:
    model = build_model({"name": "cnn"})
    rows = summarize(model, model.input_shape)
    assert rows[0].macs == HAND_COUNT and {r.name: r.macs for r in rows}["encoder.1.conv"] == CONV2
    text = format_summary(model, rows, model.input_shape)
    assert re.search(r"encoder\.1\.conv\s+Conv2d\s+\[2, 64, 14, 14\]\s+18,496\s+0\s+3,612,672$", text, re.M)
    assert "Total MACs: 4,241,152 per sample (4.24 M;" in text
    assert describe_model(model, model.input_shape, "cnn") == \
        "cnn (CNN): 421,834 params, 4.24 M MACs per sample, input [1, 28, 28]"
    assert format_macs(999) == "999" and format_macs(51_200_000_000) == "51.20 G"


def test_summary_command_prints_the_total(run_main) -> None:
    result = run_main("summary", "model=cnn")
    assert result.returncode == 0, result.stderr
    assert f"Total MACs: {HAND_COUNT:,} per sample" in result.stdout


def _flop_counter_macs(model: nn.Module, input_shape: tuple[int, ...], batch_size: int = 2,
                       grad: bool = False) -> dict[str, int]:
    """torch's own count (FlopCounterMode) of every module, the reference for the hook-based one."""
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter, torch.set_grad_enabled(grad):
        model.eval()(torch.zeros(batch_size, *input_shape))
    return macs_by_module(model, counter.get_flop_counts(), batch_size)


@pytest.mark.parametrize("option", sorted(p.stem for p in (conf_dir() / "model").glob("*.yaml")))
def test_hook_count_equals_flop_counter_for_every_shipped_model(option: str) -> None:
    model = create_model(option, seed=0)
    assert all(_countable(m) for m in model.modules()), "a shipped model fell back to FlopCounterMode"
    # Both counts read only shapes (the hooks from the layers' inputs, FlopCounterMode from each op's): on the meta
    # device they are the same numbers, with no arithmetic done (vit_b_16, maxvit_t, resnet50 took seconds each)
    with torch.device("meta"):
        _count_both(model.to("meta"))


def _count_both(model: nn.Module) -> None:
    """The hooks' count of ``model`` equals FlopCounterMode's, module by module."""
    hooks = forward_macs(model, lambda: model.eval()(torch.zeros(2, *model.input_shape)), 2)
    if any(isinstance(m, nn.LSTM) for m in model.modules()):
        # FlopCounterMode sees the fused LSTM kernel as 0; the formula counts the gates at each step
        assert hooks[""] == 28 * 4 * 128 * (28 + 128) + 128 * 10
        return
    # MultiheadAttention is counted as its unfused path (gradients on, attention weights returned) is:
    # FlopCounterMode sees that one (the fused kernel need_weights=false takes, as vit_b_16's nodes call it, it
    # counts as nothing)
    grad_mode = any(isinstance(m, nn.MultiheadAttention) for m in model.modules())
    reference = _weights_returned(model) if grad_mode else model
    assert hooks == _flop_counter_macs(reference, model.input_shape, grad=grad_mode) and hooks[""] > 0


def _weights_returned(model: nn.Module) -> nn.Module:
    """A copy of ``model`` whose nodes call their blocks without ``need_weights=False`` (the same arithmetic)."""
    from modelforge.models.graph_build import Graph

    copy = copy_module(model)
    for graph in (m for m in copy.modules() if isinstance(m, Graph)):
        graph.call_kwargs = {n: {k: v for k, v in kw.items() if k != "need_weights"} for n, kw in graph.call_kwargs.items()}
    return copy


def test_every_block_and_torch_layer_kind_counts_as_flop_counter_does() -> None:
    model = nn.Sequential(
        ConvBlock(3, 8, kernel_size=3, padding=1, pool="max"),  # [B, 8, 12, 12]
        nn.Conv2d(8, 8, 3, groups=4),  # grouped: [B, 8, 10, 10]
        nn.Sequential(nn.Flatten(2), nn.Conv1d(8, 4, 2), nn.AdaptiveAvgPool1d(9)),  # [B, 4, 9]
        nn.Flatten(), LinearBlock(36, 16, norm=True, dropout=0.1), nn.Linear(16, 5), nn.GELU(), nn.LayerNorm(5),
        nn.Softmax(dim=1),
    )
    hooks = forward_macs(model, lambda: model.eval()(torch.zeros(2, 3, 24, 24)), 2)
    assert hooks == _flop_counter_macs(model, (3, 24, 24)) and hooks["1"] > 0 and hooks["2.1"] > 0


def test_a_layer_of_unknown_kind_is_counted_by_flop_counter() -> None:
    class Bilinear(nn.Module):  # calls torch.matmul itself: only FlopCounterMode sees it
        def __init__(self) -> None:
            super().__init__()
            self.weight = nn.Parameter(torch.ones(6, 6))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x @ self.weight

    model = nn.Sequential(nn.Linear(4, 6), Bilinear())
    assert not _countable(model[1])
    assert count_macs(model, (4,)) == (4 * 6 + 6 * 6, {"0": 24, "1": 36})


@pytest.mark.parametrize(("args", "label", "params"), [
    (["model=yolov8_cls", "model.scale=s"], "yolov8_cls (scale s)", "5,092,970"), (["model=lenet5"], "lenet5", "61,706"),
    (["model=cnn"], "cnn", "421,834")])
def test_summary_names_a_zoo_model_by_its_file_and_scale(run_main, args: list[str], label: str, params: str) -> None:
    result = run_main("summary", *args)
    assert result.returncode == 0, result.stderr
    assert f"\nModel: {label}\nInput shape: [1, 28, 28]" in result.stdout
    assert f"Total params: {params}" in result.stdout


def test_the_model_line_of_a_graph_is_its_files_name() -> None:
    from modelforge.build import model_label
    from modelforge.models.definitions import ModelFiles

    model = create_model("yolov8_cls", ["scale=m"], seed=0)
    cfg = {"name": "graph", "scales": {"m": [0.67, 0.75, 1024]}, "scale": "m"}
    label = model_label(cfg, ModelFiles("yolov8_cls", ()))
    assert describe_model(model, model.input_shape, label, macs=7) == \
        f"yolov8_cls (scale m): {sum(p.numel() for p in model.parameters()):,} params, 7 MACs per sample, input [1, 28, 28]"
    assert model_label({"name": "graph"}, ModelFiles("configs/my_net.yaml", ())) == "my_net"
    assert model_label({"name": "graph"}) == "graph" and model_label({"name": "cnn"}, ModelFiles("cnn", ())) == "cnn"


# issue 39: summary and its MACs for any graph that builds, as a user runs it on a model file of their own
SWINISH = """\
defaults:
  - /model_defaults/graph@_here_
  - /blocks/swin@blocks
  - _self_
name: graph
nodes:
  patches: {block: nn.Conv2d, args: {out_channels: 32, kernel_size: 2, stride: 2}}   # [B, 32, 14, 14]
  last:    {block: permute, args: {dims: [0, 2, 3, 1]}}                             # [B, 14, 14, 32]
  norm:    {block: nn.LayerNorm, args: {normalized_shape: 32}}
  plain:   {block: swin_block, args: {heads: 2, window: 7}}
  shifted: {block: swin_block, args: {heads: 2, window: 7, shifted: true}}
  pool:    {block: mean, args: {dim: [1, 2]}}
  head:    {block: nn.Linear, args: {out_features: n_classes}}
"""

# a learned map permuted under no_grad, beside a layer only FlopCounterMode can count (PixelShuffle):
# summary died in a 120-line traceback from torch's module tracker ("Expected gradient function to be set")
LEARNED_MAP = """\
defaults:
  - /model_defaults/graph@_here_
  - _self_
name: graph
nodes:
  conv:  {block: nn.Conv2d, args: {out_channels: 8, kernel_size: 1}}    # [B, 8, 28, 28]
  up:    {block: nn.PixelShuffle, args: {upscale_factor: 2}}            # [B, 2, 56, 56]
  map:   {block: parameter, args: {shape: [56, 56, 2]}, inputs: []}
  chw:   {block: permute, args: {dims: [2, 0, 1]}}                      # [2, 56, 56]
  mixed: {block: mul, inputs: [up, chw]}
  pool:  {block: mean, args: {dim: [2, 3]}}
  head:  {block: nn.Linear, args: {out_features: n_classes}}
"""


@pytest.fixture(scope="module")
def user_models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("summary_project")
    (root / "configs" / "model").mkdir(parents=True)
    (root / "configs" / "model" / "swinish.yaml").write_text(SWINISH)
    (root / "configs" / "model" / "learned_map.yaml").write_text(LEARNED_MAP)
    (root / "configs" / "model" / "batch_moved.yaml").write_text(LEARNED_MAP.replace(
        "  chw:   {block: permute, args: {dims: [2, 0, 1]}}", "  chw:   {block: permute, args: {dims: [1, 0, 2, 3]}, "
        "inputs: [up]}").replace("inputs: [up, chw]", "inputs: [map, chw]"))
    return root


def test_summary_of_a_swin_graph_prints_its_macs(run_main, user_models: Path) -> None:
    result = run_main("summary", "--config-dir", "configs", "model=swinish", cwd=user_models)
    assert result.returncode == 0, result.stderr
    model = create_model("swinish", config_dir=user_models / "configs", seed=0)
    assert all(_countable(m) for m in model.modules())  # counted by hooks: every op is known
    macs = forward_macs(model, lambda: model.eval()(torch.zeros(2, *model.input_shape)), 2)
    assert macs == _flop_counter_macs(model, model.input_shape)  # as torch counts it
    attention = 2 * 4 * 2 * 49 * 49 * 16  # per block: scores and weighted sum, 4 windows, 2 heads of 16
    assert macs["nodes.shifted.attn"] == 196 * 32 * 96 + attention + 196 * 32 * 32  # qkv, attention, proj
    buffers = 49 * 49 + 4 * 49  # the constants: offsets in a window, region ids of 4 windows (not saved)
    assert re.search(rf"nodes\.shifted\s+swin_block\s+\[2, 14, 14, 32\]\s+13,042\s+{buffers:,}\s+"
                     rf"{macs['nodes.shifted']:,}$", result.stdout, re.M), result.stdout
    assert f"Total MACs: {macs['']:,} per sample" in result.stdout


def test_summary_of_a_permuted_parameter_beside_a_layer_of_unknown_kind(run_main, user_models: Path) -> None:
    result = run_main("summary", "--config-dir", "configs", "model=learned_map", cwd=user_models)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    conv, head = 28 * 28 * 8 * 1, 2 * 10
    assert f"Total MACs: {conv + head:,} per sample" in result.stdout, result.stdout
    model = create_model("learned_map", config_dir=user_models / "configs", seed=0)
    assert not _countable(model.nodes.up) and count_macs(model, model.input_shape)[0] == conv + head
    assert all(p.requires_grad for p in model.parameters())  # as they were


def test_a_permute_that_moves_the_batch_is_one_error_before_the_summary(run_main, user_models: Path) -> None:
    result = run_main("summary", "--config-dir", "configs", "model=batch_moved", cwd=user_models)
    assert result.returncode == 2
    assert result.stderr.splitlines()[0] == (
        "error: model.nodes.chw.args.dims: node 'chw' (permute): [1, 0, 2, 3] moves the batch dimension (0) of its "
        "input to place 1: up [2, 2, 56, 56]"), result.stderr
    assert "Traceback" not in result.stderr


def test_flop_counter_still_fails_on_a_no_grad_view_of_a_parameter() -> None:
    """The torch behaviour modelforge.inspect.flops works around (parameters' requires_grad off while counting):
    when this test fails, torch has fixed it and the workaround can go."""
    from torch.utils.flop_counter import FlopCounterMode

    class Viewed(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.weight = nn.Parameter(torch.ones(2, 3))

        def forward(self) -> torch.Tensor:
            return self.weight.t()

    model = nn.Sequential()
    model.add_module("viewed", Viewed())
    with pytest.raises(AssertionError, match="Expected gradient function to be set"), torch.no_grad(), \
            FlopCounterMode(display=False):
        model.viewed()


def test_work_without_a_batch_dimension_is_counted_once_not_divided_by_the_batch() -> None:
    """Issue 49: an MLP on a constant (Swin-V2's position-bias MLP) runs once per call whatever the batch: its MACs
    per sample are one call's, in the summary (a batch of 2) as in count_macs (one sample), by hooks and by
    FlopCounterMode."""
    model = build_model({"name": "graph", "nodes": {
        "flat": {"block": "flatten", "inputs": ["input"]},                                   # [B, 784]
        "fc": {"block": "nn.Linear", "args": {"out_features": 16}},                          # 784 * 16 per sample
        "grid": {"block": "constant", "inputs": [], "args": {"shape": [50, 8], "value": 1.0}},
        "mlp": {"block": "nn.Linear", "args": {"out_features": 16}},                         # 50 * 8 * 16 per call
        "bias": {"block": "mean", "args": {"dim": 0}},                                       # [16]
        "out": {"block": "add", "args": {"broadcast": True}, "inputs": ["fc", "bias"]}}})
    per_call, per_sample = 50 * 8 * 16, 784 * 16
    assert model.nodes.mlp.batch_free and not getattr(model.nodes.fc, "batch_free", False)
    for batch in (1, 2, 5):
        total, layers = count_macs(model, model.input_shape, batch_size=batch)
        assert (total, layers["nodes.mlp"], layers["nodes.fc"]) == (per_sample + per_call, per_call, per_sample)
    rows = {row.name: row.macs for row in summarize(model, model.input_shape)}
    assert rows["(model)"] == rows["nodes"] == per_sample + per_call and rows["nodes.mlp"] == per_call
    assert _flop_counter_macs(model, model.input_shape, batch_size=3)[""] == per_sample + per_call

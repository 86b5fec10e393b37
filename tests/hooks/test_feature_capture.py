"""feature_capture: the kept outputs equal the layers' outputs, detached, bounded; PNG grids on request."""

from __future__ import annotations

import pytest
import torch

from modelforge.errors import ConfigError
from modelforge.hooks import build_hook_plugins
from tests.helpers.tiny_net import hook_count

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def test_features_equal_the_layer_outputs_computed_directly(model, batch) -> None:
    model.eval()
    plugin = build_hook_plugins({"feature_capture": {"layers": ["encoder.?", "decoder"]}})[0]
    with plugin.attach(model):
        out = model(batch)
    with torch.no_grad():
        direct, x = {}, batch
        for i, layer in enumerate(model.encoder):
            x = layer(x)
            direct[f"encoder.{i}"] = x.clone()  # encoder.2 is an in-place ReLU: it overwrites encoder.1's output
        direct["decoder"] = model.decoder(x)
    assert list(plugin.features) == [*(f"encoder.{i}" for i in range(5)), "decoder"]
    for name, expected in direct.items():
        assert torch.equal(plugin.features[name], expected), name
    assert torch.equal(plugin.features["decoder"], out.detach())


def test_features_are_detached_copies(model, batch) -> None:
    plugin = build_hook_plugins({"feature_capture": {"layers": ["encoder.1"]}})[0]
    with plugin.attach(model):
        model(batch).sum().backward()
    feature = plugin.features["encoder.1"]
    assert not feature.requires_grad and feature.grad_fn is None
    assert (feature < 0).any()  # the in-place ReLU that followed did not reach the copy


def test_default_targets_are_the_models_children(model, batch) -> None:
    plugin = build_hook_plugins({"feature_capture": {}})[0]
    with plugin.attach(model):
        model(batch)
    assert {k: list(v.shape) for k, v in plugin.features.items()} == {"encoder": [2, 6, 8, 8], "decoder": [2, 10]}


def test_memory_is_bounded_by_keep(model) -> None:
    plugin = build_hook_plugins({"feature_capture": {"layers": ["decoder"], "keep": 2}})[0]
    inputs = [torch.full((1, 1, 8, 8), float(i)) for i in range(4)]
    with plugin.attach(model):
        outputs = [model(x).detach() for x in inputs]
    kept = plugin.history("decoder")
    assert len(kept) == 2
    assert torch.equal(kept[0], outputs[2]) and torch.equal(kept[1], outputs[3])
    assert torch.equal(plugin.features["decoder"], outputs[3])


def test_features_stay_readable_after_removal_and_reset_on_reattach(model, batch) -> None:
    plugin = build_hook_plugins({"feature_capture": {}})[0]
    with plugin.attach(model):
        model(batch)
    assert hook_count(model) == 0 and set(plugin.features) == {"encoder", "decoder"}
    plugin.attach(model)
    assert plugin.features == {}
    plugin.detach()


def test_save_images_writes_png_grids_at_most_max_images_times(model, batch, tmp_path, capsys) -> None:
    plugin = build_hook_plugins({"feature_capture": {
        "layers": ["encoder.0", "decoder.1"], "save_images": True, "max_images": 2}})[0]
    with plugin.attach(model, run_dir=tmp_path):
        for _ in range(3):
            model(batch)
    assert capsys.readouterr().out.splitlines() == [  # where they went, said once
        f"feature_capture feature maps written to {tmp_path / 'features'} (LAYER_stepCALL.png, the first 2 calls of "
        "each layer)"]
    files = sorted(p.name for p in (tmp_path / "features").iterdir())
    assert files == ["encoder.0_step000.png", "encoder.0_step001.png"]  # decoder.1's 2-D output has no maps
    for name in files:
        assert (tmp_path / "features" / name).read_bytes()[:8] == PNG_SIGNATURE
    plugin.attach(model, run_dir=tmp_path)  # a second run (e.g. test after fit) has no budget left
    model(batch)
    plugin.detach()
    assert len(list((tmp_path / "features").iterdir())) == 2


def test_save_images_needs_a_run_dir(model) -> None:
    plugin = build_hook_plugins({"feature_capture": {"save_images": True}})[0]
    with pytest.raises(ConfigError, match=r"^hooks\.feature_capture\.save_images: needs a run directory"):
        plugin.attach(model)
    assert hook_count(model) == 0


def test_feature_grid_tiles_each_channel_scaled_to_its_own_range() -> None:
    from modelforge.hooks.feature_images import GAP, row_gap, tile_channels

    maps = torch.stack([torch.arange(6.0).reshape(2, 3), torch.full((2, 3), 5.0), -torch.arange(6.0).reshape(2, 3)])
    mosaic = tile_channels(maps, cols=2)  # 3 channels: two on the first row, one on the second
    gap_y = row_gap(2)
    assert mosaic.shape == (gap_y + 2 * (2 + gap_y), 2 * 3 + GAP)
    first = mosaic[gap_y:gap_y + 2, 0:3]
    assert torch.equal(first, torch.arange(6.0).reshape(2, 3) / 5)  # 0..5 -> 0..1
    assert torch.equal(mosaic[gap_y:gap_y + 2, 3 + GAP:], torch.zeros(2, 3))  # a constant channel
    third = mosaic[2 * gap_y + 2:2 * gap_y + 4, 0:3]
    assert torch.allclose(third, 1 - torch.arange(6.0).reshape(2, 3) / 5)  # -5..0 -> 0..1
    assert mosaic[:gap_y].isnan().all() and mosaic[gap_y:gap_y + 2, 3:3 + GAP].isnan().all()  # background
    assert mosaic[2 * gap_y + 2:, 3 + GAP:].isnan().all()  # no fourth channel

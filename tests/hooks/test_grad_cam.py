"""grad_cam: forward + full backward hooks give Grad-CAM heatmaps, written as a PNG at the first test batch."""

from __future__ import annotations

from pathlib import Path

import pytest
import pytorch_lightning as pl
import torch
import torch.nn.functional as F

from modelforge.errors import ConfigError
from modelforge.hooks import build_hook_plugins
from modelforge.train.hook_callback import HookPluginsCallback
from tests.helpers.tiny_net import hook_count, module_hooks
from tests.helpers.lit_tiny import LitTiny, loader

pytestmark = [pytest.mark.filterwarnings("ignore:.*treespec"),
              pytest.mark.filterwarnings("ignore:The number of training batches")]


def grad_cam(**options: object):
    return build_hook_plugins({"grad_cam": options})[0]


def reference_cam(model, x: torch.Tensor) -> torch.Tensor:
    """Grad-CAM of encoder.3 written out by hand, without hooks."""
    a = model.encoder[:4](x)
    logits = model.decoder(model.encoder[4](a))
    score = logits.gather(1, logits.argmax(1, keepdim=True)).sum()
    (grad,) = torch.autograd.grad(score, a)
    cam = F.relu((grad.mean(dim=(2, 3), keepdim=True) * a).sum(1, keepdim=True))
    cam = F.interpolate(cam, size=x.shape[-2:], mode="bilinear", align_corners=False)[:, 0]
    return cam / cam.flatten(1).amax(1).clamp_min(1e-12).view(-1, 1, 1)


def test_heatmaps_equal_a_hand_written_grad_cam_and_leave_grads_alone(model) -> None:
    x = torch.randn(4, 1, 8, 8, generator=torch.Generator().manual_seed(2))
    model.eval()
    plugin = grad_cam()  # default layer: the last Conv2d, encoder.3
    with plugin.attach(model):
        assert module_hooks(model)["_backward_hooks"] == 1  # a full backward hook on encoder.3
        result = plugin.compute(model, x)
    assert result.layer == "encoder.3" and list(result.heatmaps.shape) == [4, 8, 8]
    assert torch.allclose(result.heatmaps, reference_cam(model, x), atol=1e-5)
    assert torch.equal(result.predicted, model(x).argmax(1))
    assert all(p.grad is None for p in model.parameters())
    assert hook_count(model) == 0


def test_compute_works_inside_inference_mode_on_an_inference_tensor(model) -> None:
    plugin = grad_cam(layer="encoder.3")
    with plugin.attach(model), torch.inference_mode():
        x = torch.randn(2, 1, 8, 8)
        heatmaps = plugin.compute(model, x).heatmaps
    assert heatmaps.min() >= 0 and heatmaps.max() <= 1 and heatmaps.amax(dim=(1, 2)).max() == 1


def test_a_lightning_test_run_writes_the_png_grid_and_says_where(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    plugin = grad_cam(layer="encoder.3", num_images=3)
    trainer = pl.Trainer(callbacks=[HookPluginsCallback([plugin], run_dir=tmp_path)], accelerator="cpu",
                         logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False)
    module = LitTiny()
    trainer.test(module, loader(), verbose=False)  # under inference_mode, as eval runs it
    png = tmp_path / "grad_cam" / "encoder.3.png"
    assert plugin.saved_images == [png] and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert [p.name for p in png.parent.iterdir()] == ["encoder.3.png"]  # no temporary file left
    assert capsys.readouterr().out.splitlines() == [f"grad_cam heatmaps written to {png}"]
    assert hook_count(module.model) == 0


def test_one_layer_and_a_4d_output_are_required(model, batch) -> None:
    with pytest.raises(ConfigError, match=r"^hooks\.grad_cam\.layers: grad_cam explains one layer\n"
                                          r"  hint: use hooks\.grad_cam\.layer=encoder\.1"):
        grad_cam(layers=["encoder.0"])
    with pytest.raises(ConfigError, match=r"^hooks\.grad_cam\.layer: 'encoder\.\*' matches 5 modules"):
        grad_cam(layer="encoder.*").attach(model)
    plugin = grad_cam(layer="decoder.1")
    with plugin.attach(model), pytest.raises(ConfigError, match=r"'decoder\.1' gives \[2, 10\]: Grad-CAM needs"):
        plugin.compute(model, batch)


@pytest.mark.parametrize(("setup", "why"), [
    ("decoder lowers every score", "the gradient-weighted feature maps are nowhere positive: at that layer, no "
                                   "location raises the class score"),
    ("decoder ignores its input", "the gradient of the class score at that layer is zero"),
    ("blank images, no biases", "the layer's output is zero for this image"),
])
def test_a_blank_heatmap_is_explained_in_the_console_and_the_picture(model, tmp_path: Path, setup: str, why: str,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    x = torch.randn(3, 1, 8, 8, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        if setup == "decoder lowers every score":  # the ReLU's maps are >= 0 and every weight on them < 0
            model.decoder[1].weight.copy_(-model.decoder[1].weight.abs() - 0.01)
        elif setup == "decoder ignores its input":
            model.decoder[1].weight.zero_()
        else:
            x = torch.zeros_like(x)
            for m in model.modules():
                if getattr(m, "bias", None) is not None:
                    m.bias.zero_()
    model.eval()
    plugin = grad_cam(layer="encoder.4")
    with plugin.attach(model, run_dir=tmp_path):
        result = plugin.compute(model, x)
        assert result.blank == {0: why, 1: why, 2: why} and not result.heatmaps.any()
        plugin.after_test_batch(model, (x, torch.tensor([1, 2, 3])), 0)
    png = tmp_path / "grad_cam" / "encoder.4.png"
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"grad_cam heatmaps written to {png}"
    assert lines[1:] == [f"grad_cam: the heatmap of image {i} (predicted {int(result.predicted[i])}) is blank: {why}"
                         for i in range(3)]


def test_a_heatmap_with_something_to_show_is_not_called_blank(model) -> None:
    x = torch.randn(4, 1, 8, 8, generator=torch.Generator().manual_seed(2))
    with grad_cam().attach(model) as handle:
        result = handle.plugin.compute(model.eval(), x)
    assert result.blank == {} and (result.heatmaps.amax(dim=(1, 2)) == 1).all()

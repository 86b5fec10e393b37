"""``grad_cam``: class-activation heatmaps (Grad-CAM) of one conv layer, from a forward and a full backward hook.

A forward hook keeps the chosen layer's output ``A`` (``[N, K, h, w]``) and a
module **full backward hook** (``register_full_backward_hook``) its gradient
``dS/dA``, where ``S`` is the score of the predicted class. The heatmap is
``relu(sum_k mean_hw(dS/dA_k) * A_k)``, upsampled to the input size and scaled
to [0, 1] per image (Selvaraju et al., 2017). The hooks record only inside
:meth:`GradCam.compute`; every other forward passes through them untouched.

``plugin.compute(model, images)`` works on any attached ``nn.Module``. In a
Lightning run, the first test batch of every ``trainer.test`` (the end of
``train``, and ``eval``) is explained: ``num_images`` digits are written as one
PNG grid (image, heatmap, overlay; predicted and true class in the title) to
``<run dir>/grad_cam/<layer>.png``, and its path is printed. Lightning tests
under ``inference_mode``, so that pass runs in ``torch.inference_mode(False)`` +
``torch.enable_grad()`` on a fresh copy of the batch; parameter ``.grad`` is left
untouched (``torch.autograd.grad`` to the input, not ``backward()``).

``layer`` is one module name (default: the last ``Conv2d``). The chosen module's
output must not be modified in place afterwards (a full backward hook forbids it):
pick a conv block (``encoder.1``) or a conv, not a BatchNorm followed by an in-place ReLU.
torch.compile: the hooks are traced like any other; the CAM pass then runs the compiled
model with gradients on (one more compilation). DDP: every rank computes CAMs of its own
first batch; only rank zero writes the PNG.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from modelforge.errors import ConfigError
from modelforge.hooks.base import HookPlugin, PluginOptions, require_at_least
from modelforge.hooks.targets import Target
from modelforge.hooks.verbose import is_rank_zero
from modelforge.registry import HOOKS


@dataclass
class GradCamOptions(PluginOptions):
    """Options of ``hooks.grad_cam``: the conv ``layer`` explained, and how many test digits are drawn."""

    layer: str | None = None
    num_images: int = 8

    def check(self, path: str) -> None:
        if self.layers is not None:
            raise ConfigError(f"{path}.layers", "grad_cam explains one layer", hint=f"use {path}.layer=encoder.1")
        super().check(path)
        if self.layer is not None and not self.layer.strip():
            raise ConfigError(f"{path}.layer", "is empty", allowed="a module name like encoder.1, or null")
        require_at_least(self.num_images, 1, f"{path}.num_images")


@dataclass
class CamResult:
    """Heatmaps ``[N, H, W]`` in [0, 1] at the input's size, with the predicted classes and the explained layer."""

    heatmaps: Tensor
    predicted: Tensor
    layer: str
    blank: dict[int, str] = field(default_factory=dict)  # image index -> why its heatmap is all zero


@HOOKS.register("grad_cam", schema=GradCamOptions)
class GradCam(HookPlugin):
    """Grad-CAM heatmaps of one layer; written as PNGs for the first test batch of a Lightning run."""

    name = "grad_cam"
    Options = GradCamOptions
    pattern_key = "layer"
    needs_class_scores = True  # the score of the predicted class: a classifier's output

    def __init__(self, options: GradCamOptions | None = None, *, path: str | None = None) -> None:
        super().__init__(options, path=path)
        self._recording = False
        self._activation: Tensor | None = None
        self._gradient: Tensor | None = None
        self.layer_name: str | None = None
        self.run_dir: Path | None = None
        self.saved_images: list[Path] = []

    def patterns(self) -> list[str]:
        return [self.options.layer or "Conv2d"]

    def _register(self, targets: list[Target], handles: list[Any], *, run_dir: Path | None, logger: Any) -> None:
        if self.options.layer is not None and len(targets) > 1:
            raise ConfigError(f"{self.path}.layer", f"{self.options.layer!r} matches {len(targets)} modules: "
                              + ", ".join(t.name for t in targets), hint="name exactly one module")
        target = targets[-1]  # by default the last Conv2d: the most semantic, still spatial
        self.layer_name = target.name or "model"
        self.run_dir = Path(run_dir) if run_dir is not None else None
        handles.append(target.module.register_forward_hook(self._keep_activation))
        handles.append(target.module.register_full_backward_hook(self._keep_gradient))

    def _keep_activation(self, module: nn.Module, inputs: Any, output: Any) -> None:
        if self._recording:
            if not isinstance(output, Tensor) or output.dim() != 4:
                raise ConfigError(f"{self.path}.layer", f"{self.layer_name!r} gives "
                                  f"{list(getattr(output, 'shape', []))}: Grad-CAM needs a [N, C, H, W] feature map",
                                  hint="choose a conv layer or block, e.g. encoder.1")
            self._activation = output

    def _keep_gradient(self, module: nn.Module, grad_input: Any, grad_output: tuple[Tensor, ...]) -> None:
        if self._recording:
            self._gradient = grad_output[0]

    def compute(self, model: nn.Module, images: Tensor, classes: Tensor | None = None) -> CamResult:
        """Heatmaps of ``images`` for ``classes`` (default: the predicted ones); ``model`` must be attached."""
        if not self.attached:
            raise RuntimeError(f"{self.path}: attach the plugin to the model before compute()")
        was_training = model.training
        self._recording = True
        try:
            with torch.inference_mode(False), torch.enable_grad():
                x = images.detach().clone().requires_grad_(True)  # a normal tensor even from an inference batch
                logits = model.eval()(x)
                predicted = logits.argmax(dim=1)
                chosen = predicted if classes is None else classes.to(predicted.device)
                score = logits.gather(1, chosen.view(-1, 1)).sum()
                torch.autograd.grad(score, x)  # fires the full backward hook; parameters' .grad untouched
                activation, gradient = self._activation, self._gradient
                if activation is None or gradient is None:
                    raise RuntimeError(f"{self.path}: layer {self.layer_name!r} was not reached by the forward")
                weights = gradient.mean(dim=(2, 3), keepdim=True)
                cam = F.relu((weights * activation).sum(dim=1, keepdim=True)).detach()
                blank = {i: _why_blank(activation[i], gradient[i])
                         for i in (cam.flatten(1).amax(dim=1) <= 0).nonzero().flatten().tolist()}
                cam = F.interpolate(cam.float(), size=images.shape[-2:], mode="bilinear", align_corners=False)[:, 0]
                peak = cam.flatten(1).amax(dim=1).clamp_min(1e-12).view(-1, 1, 1)
                return CamResult(cam / peak, predicted.detach(), self.layer_name or "model", blank)
        finally:
            self._recording = False
            self._activation = self._gradient = None
            model.train(was_training)

    def after_test_batch(self, model: nn.Module, batch: Any, batch_idx: int) -> None:
        """Explain the first ``num_images`` digits of the first test batch and write the PNG (rank zero)."""
        if batch_idx != 0 or self.run_dir is None:
            return
        images, labels = batch[0][: self.options.num_images], batch[1][: self.options.num_images]
        result = self.compute(model, images)
        if is_rank_zero():
            from modelforge.hooks.cam_images import save_cam_grid

            file = save_cam_grid(images, result.heatmaps, result.predicted, labels,
                                 self.run_dir / "grad_cam" / f"{result.layer}.png", title=f"Grad-CAM of {result.layer}",
                                 blank=result.blank)
            self.saved_images.append(file)
            print(f"grad_cam heatmaps written to {file}")  # the one file a user asked for: say where it is
            for i, why in result.blank.items():  # a blank panel would look like a failure of the tool
                print(f"grad_cam: the heatmap of image {i} (predicted {int(result.predicted[i])}) is blank: {why}")


def _why_blank(activation: Tensor, gradient: Tensor) -> str:
    """Why one image's CAM (``relu`` of the gradient-weighted sum of the layer's maps) is zero everywhere."""
    if not gradient.any():
        return "the gradient of the class score at that layer is zero"
    if not activation.any():
        return "the layer's output is zero for this image"
    return "the gradient-weighted feature maps are nowhere positive: at that layer, no location raises the class score"

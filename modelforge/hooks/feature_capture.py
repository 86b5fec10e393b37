"""``feature_capture``: keep the outputs of chosen layers, readable after a forward.

``plugin.features["encoder.1"]`` is that layer's output of the latest forward,
detached and cloned (a later in-place op, such as ``ReLU(inplace=True)``, cannot
change it). Memory is bounded: each layer keeps its last ``keep`` outputs
(``plugin.history(name)``), on the device they were computed on. Default targets:
the model's direct children (for a conv encoder's blocks use ``encoder.?``).

With ``save_images`` the feature maps of one sample (4-D outputs only) are
written as PNG grids to ``run_dir/features/<layer>_step<call>.png``, for the
first ``max_images`` calls of each layer over the plugin's life, so re-attaching
(fit, then test) never overwrites an image; the first one written prints where they go. It needs a ``run_dir``.
"""

from __future__ import annotations

import functools
from collections import defaultdict, deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from modelforge.errors import ConfigError
from modelforge.hooks.base import HookPlugin, PluginOptions, require_at_least
from modelforge.hooks.targets import Target
from modelforge.hooks.verbose import is_rank_zero
from modelforge.registry import HOOKS


@dataclass
class FeatureCaptureOptions(PluginOptions):
    """Options of ``hooks.feature_capture``: outputs kept per layer, and PNG grids of them."""

    keep: int = 1
    save_images: bool = False
    max_images: int = 3

    def check(self, path: str) -> None:
        super().check(path)
        require_at_least(self.keep, 1, f"{path}.keep")
        require_at_least(self.max_images, 0, f"{path}.max_images")


def detached_copy(output: Any) -> Any:
    """Tensors detached and cloned, inside tuples, lists and dicts too; other values as they are."""
    if isinstance(output, torch.Tensor):
        return output.detach().clone()
    if isinstance(output, list):
        return [detached_copy(o) for o in output]
    if isinstance(output, tuple):
        return tuple(detached_copy(o) for o in output)
    if isinstance(output, dict):
        return {k: detached_copy(v) for k, v in output.items()}
    return output


@HOOKS.register("feature_capture", schema=FeatureCaptureOptions)
class FeatureCapture(HookPlugin):
    """Keep the latest outputs of chosen layers (detached), optionally saved as PNG grids."""

    name = "feature_capture"
    Options = FeatureCaptureOptions
    default_targets = "children"

    def __init__(self, options: FeatureCaptureOptions | None = None, *, path: str | None = None) -> None:
        super().__init__(options, path=path)
        self._history: dict[str, deque[Any]] = {}
        self._calls: defaultdict[str, int] = defaultdict(int)  # per layer, over the plugin's life
        self._images_saved: defaultdict[str, int] = defaultdict(int)
        self.image_dir: Path | None = None
        self.saved_images: list[Path] = []

    @property
    def features(self) -> dict[str, Any]:
        """Each targeted layer's output of the latest forward that reached it."""
        return {name: kept[-1] for name, kept in self._history.items() if kept}

    def history(self, name: str) -> list[Any]:
        """The last ``keep`` outputs of layer ``name``, oldest first."""
        return list(self._history.get(name, ()))

    def _register(self, targets: list[Target], handles: list[Any], *, run_dir: Path | None, logger: Any) -> None:
        if self.options.save_images:
            if run_dir is None:
                raise ConfigError(f"{self.path}.save_images", "needs a run directory to write the images into",
                                  hint="pass run_dir= to attach(); the training callback passes the run's directory")
            self.image_dir = Path(run_dir) / "features"
        self._history = {t.name: deque(maxlen=self.options.keep) for t in targets}
        for target in targets:
            handles.append(target.module.register_forward_hook(functools.partial(self._capture, target.name)))

    def _capture(self, name: str, module: nn.Module, inputs: Any, output: Any) -> None:
        self._history[name].append(detached_copy(output))
        call = self._calls[name]
        self._calls[name] += 1
        wanted = self.options.save_images and self._images_saved[name] < self.options.max_images
        if wanted and isinstance(output, torch.Tensor) and output.dim() == 4:
            from modelforge.hooks.feature_images import save_feature_grid

            file = self.image_dir / f"{name or 'model'}_step{call:03d}.png"
            title = f"{name or 'model'} ({type(module).__name__}), call {call}, sample 0"
            self.saved_images.append(save_feature_grid(output[0], file, title))
            self._images_saved[name] += 1
            if len(self.saved_images) == 1 and is_rank_zero():  # the files a user asked for: say where, once
                print(f"feature_capture feature maps written to {self.image_dir} (LAYER_stepCALL.png, the first "
                      f"{self.options.max_images} calls of each layer)")

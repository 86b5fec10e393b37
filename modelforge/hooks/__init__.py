"""Hook plugins: look inside (or steer) a running model through torch hooks.

Each plugin lives in its own module and registers itself in ``HOOKS`` when
imported below; :func:`build_hook_plugins` turns the ``hooks`` config into
plugin objects, and ``plugin.attach(model)`` returns a handle that removes every
hook it registered. Nothing here imports Lightning or matplotlib.
"""

from modelforge.hooks.ablate import Ablate, AblateOptions
from modelforge.hooks.activation_stats import ActivationStats, ActivationStatsOptions
from modelforge.hooks.base import HookHandle, HookPlugin, PluginOptions
from modelforge.hooks.build import build_hook_plugins, check_precision
from modelforge.hooks.conf_store import store_hook_defaults
from modelforge.hooks.feature_capture import FeatureCapture, FeatureCaptureOptions
from modelforge.hooks.grad_cam import CamResult, GradCam, GradCamOptions
from modelforge.hooks.grad_clip import GradClip, GradClipOptions
from modelforge.hooks.grad_monitor import GradMonitor, GradMonitorOptions
from modelforge.hooks.input_noise import InputNoise, InputNoiseOptions
from modelforge.hooks.targets import Target, select_targets
from modelforge.hooks.verbose import Verbose, VerboseOptions
from modelforge.registry import store_defaults

store_defaults(store_hook_defaults)

__all__ = [
    "Ablate",
    "AblateOptions",
    "ActivationStats",
    "ActivationStatsOptions",
    "CamResult",
    "GradCam",
    "GradCamOptions",
    "InputNoise",
    "InputNoiseOptions",
    "FeatureCapture",
    "FeatureCaptureOptions",
    "GradClip",
    "GradClipOptions",
    "GradMonitor",
    "GradMonitorOptions",
    "HookHandle",
    "HookPlugin",
    "PluginOptions",
    "Target",
    "Verbose",
    "VerboseOptions",
    "build_hook_plugins",
    "check_precision",
    "select_targets",
]

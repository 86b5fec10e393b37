"""Whether a built model's output fits a classifier of the data's classes.

The builders build what a config describes, whatever its output (a backbone without its head, feature
maps): that is no error until the model is trained or evaluated as a classifier. There, its output must be
one tensor of ``n_classes`` values per sample, checked from the shape the builder recorded
(``model.output_shape``, per sample) before any batch is run, so that a head of the wrong width is one
error naming the node, not a traceback from the loss.
"""

from __future__ import annotations

from typing import Any

from torch import nn

from modelforge.errors import ConfigError

_HEAD_HINT = "write the head's width as n_classes (out_features: n_classes or out_channels: n_classes): scales never change it"


def check_classifier_output(model: nn.Module, n_classes: int, path: str = "model") -> None:
    """Refuse a model whose output is not ``[batch, n_classes]``, naming its output node and shape.

    Models that record no ``output_shape`` (a plugin's) are not checked: nothing is run to find it.
    """
    features = getattr(model, "features", None)
    if features:
        raise ConfigError(f"{path}.features", f"the model returns the feature maps {list(features)}, "
                          f"not one tensor of {n_classes} class scores", hint="a classifier leaves features out (null)")
    shape: Any = getattr(model, "output_shape", None)
    node = getattr(model, "output_node", None)
    where = f"{path}.nodes.{node.split('.')[0]}" if node else path
    said = f"the output node {node!r}" if node else "the model"
    if shape is None:
        if node is None and hasattr(model, "output_node"):  # a graph of several outputs
            raise ConfigError(f"{path}.output", f"the model returns several outputs, not one tensor of {n_classes} "
                              "class scores", hint="a classifier's output is one node: its head")
        return
    shape = list(shape)
    if shape and all(size == 1 for size in shape[1:]) and shape[0] != n_classes:
        raise ConfigError(where, f"{said} gives {shape[0]} values per sample, but the data has {n_classes} classes "
                          f"({path}.n_classes)", hint=_HEAD_HINT)
    if shape != [n_classes]:
        raise ConfigError(where, f"{said} gives {shape} per sample, but a classifier of {n_classes} classes "
                          f"gives [{n_classes}] ({path}.n_classes)",
                          hint="end the model with a head of n_classes outputs; pool and flatten a feature map first")


def check_output_shape(model: nn.Module, expected: list[int], needs: str, path: str = "model") -> None:
    """Refuse a model whose output per sample is not ``expected`` (what ``needs``, a task, asks), naming its
    output node and both shapes with the batch as ``B``. A model that records no ``output_shape`` is not checked."""
    features = getattr(model, "features", None)
    wanted = f"[B, {', '.join(map(str, expected))}]"
    if features:
        raise ConfigError(f"{path}.features", f"the model returns the feature maps {list(features)}, but {needs} "
                          f"needs one tensor {wanted}")
    shape: Any = getattr(model, "output_shape", None)
    node = getattr(model, "output_node", None)
    where = f"{path}.nodes.{node.split('.')[0]}" if node else path
    if shape is None:
        if node is None and hasattr(model, "output_node"):
            raise ConfigError(f"{path}.output", f"the model returns several outputs, but {needs} needs one {wanted}")
        return
    if list(shape) != list(expected):
        said = f"the output node {node!r}" if node else f"the model's output ({type(model).__name__})"
        raise ConfigError(where, f"{said} gives [B, {', '.join(map(str, shape))}], but {needs} needs {wanted}")

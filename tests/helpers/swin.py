"""torchvision's swin_t with random weights beside the zoo's swin_t with the same weights (its keys renamed to
ours): the parity tests' pair. Imports torchvision when called (the callers skip without it)."""

from __future__ import annotations

import torch
from torch import nn

# torchvision's Swin block parts -> ours
PAIRS = {"norm1": "norm1", "attn.qkv": "attn.qkv", "attn.proj": "attn.proj", "norm2": "norm2", "mlp.0": "fc1",
         "mlp.3": "fc2"}

STAGES = {"1": "stage1", "2": "merge1", "3": "stage2", "4": "merge2", "5": "stage3", "6": "merge3", "7": "stage4"}
BLOCK_NAMES = {**PAIRS, "attn.relative_position_bias_table": "attn.table"}


def our_key(key: str) -> str | None:
    """torchvision's SwinTransformer state_dict key -> ours (None: its relative position index, a constant here)."""
    if key.endswith("relative_position_index"):
        return None
    parts = key.split(".")
    if parts[0] == "features" and parts[1] == "0":
        return "nodes." + {"0": "patches", "2": "embed_norm"}[parts[2]] + "." + parts[3]
    if parts[0] == "features" and STAGES[parts[1]].startswith("merge"):
        return f"nodes.{STAGES[parts[1]]}.{'.'.join(parts[2:])}"
    if parts[0] == "features":
        inner, kind = ".".join(parts[3:-1]), parts[-1]
        name = BLOCK_NAMES[inner] if inner in BLOCK_NAMES else BLOCK_NAMES[f"{inner}.{kind}"]
        return f"nodes.{STAGES[parts[1]]}.{parts[2]}.{name}." + ("weight" if inner not in BLOCK_NAMES else kind)
    return f"nodes.{key}"


def swin_t_pair(side: int, dim: int) -> tuple[nn.Module, nn.Module]:
    """torchvision's swin_t (embed_dim ``dim``: 96 is swin_t's) with random weights, and ours with them."""
    from modelforge import create_model
    from tests.helpers.parity import import_torchvision_models

    SwinTransformer = import_torchvision_models().swin_transformer.SwinTransformer  # or the test skipped

    torch.manual_seed(0)
    reference = SwinTransformer([4, 4], dim, [2, 2, 6, 2], [3, 6, 12, 24], [7, 7], stochastic_depth_prob=0.2)
    ours = create_model("swin_t", ["in_channels=3", "n_classes=1000", f"input_size=[{side},{side}]",
                                   f"params.dim={dim}"], seed=0)
    with torch.no_grad():
        for parameter in reference.parameters():
            parameter.normal_(0.0, 0.1)
    state = {our_key(k): v for k, v in reference.state_dict().items() if our_key(k) is not None}
    ours.load_state_dict(state, strict=True)
    return reference, ours

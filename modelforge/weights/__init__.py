"""Weights from elsewhere: torchvision's ImageNet weights for the zoo (``torchvision_zoo``, fetched by ``hub``),
pairing a file's tensors with a model's by structure when their names differ (``pairing``), and ``.safetensors``
files (``safetensors_file``). ``init.from`` (:mod:`modelforge.train.transfer`) and ``load_model`` use them."""

from modelforge.weights.pairing import Pairing, pair_by_structure
from modelforge.weights.safetensors_file import read_safetensors, save_safetensors
from modelforge.weights.torchvision_zoo import TORCHVISION_WEIGHTS, TorchvisionWeights, torchvision_weights

__all__ = ["TORCHVISION_WEIGHTS", "Pairing", "TorchvisionWeights", "pair_by_structure", "read_safetensors",
           "save_safetensors", "torchvision_weights"]

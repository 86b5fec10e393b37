"""Model builders; importing this package registers cnn, seed_cnn, mlp and graph."""

from modelforge.models.cnn import CNN, CNNConfig, SeedCNNConfig
from modelforge.models.graph import GraphConfig, GraphModel, build_graph
from modelforge.models.mlp import MLP, MLPConfig

__all__ = ["CNN", "MLP", "CNNConfig", "GraphConfig", "GraphModel", "MLPConfig", "SeedCNNConfig", "build_graph"]

"""Model builders; importing this package registers cnn, seed_cnn, mlp and graph."""

from modelforge.models.cnn import CNN, CNNConfig, SeedCNNConfig, seed_cnn
from modelforge.models.conf_store import store_model_defaults
from modelforge.models.graph import GraphConfig, GraphModel, build_graph
from modelforge.models.mlp import MLP, MLPConfig
from modelforge.registry import store_defaults

store_defaults(lambda: store_model_defaults(("cnn", "seed_cnn", "mlp", "graph")))

__all__ = [
    "CNN", "MLP", "CNNConfig", "GraphConfig", "GraphModel", "MLPConfig", "SeedCNNConfig", "build_graph", "seed_cnn",
]

"""Training on MNIST with Lightning: imported only by `train`/`eval`, never by `import modelforge`."""

from modelforge.train.module import ClassifierModule
from modelforge.train.run import evaluate, train

__all__ = ["ClassifierModule", "evaluate", "train"]

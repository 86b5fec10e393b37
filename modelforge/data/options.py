"""The options of the IDX data modules (``data.*``): one signature holds their defaults, with no Lightning.

``IdxDataModule`` takes its options from :class:`IdxOptions`; Hydra's ``data_defaults/<name>`` nodes are made
from the same signature on ``import modelforge`` (``conf/data/mnist.yaml`` starts from ``/data_defaults/mnist``),
so no default is written twice and composing a config loads no Lightning.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from modelforge.errors import ConfigError

DEFAULTS_GROUP = "data_defaults"


def _int(low: int, high: int | None = None, *, null: bool = False) -> tuple[Callable[[Any], bool], str]:
    """A test for an integer in ``low..high`` (or None, if ``null``) and the words for it."""
    words = f"an integer >= {low}" if high is None else f"an integer in {low}..{high}"
    return (lambda v: v is None and null or _is(v, int) and low <= v <= (high or v)), words


def _number(words: str, positive: bool = False) -> tuple[Callable[[Any], bool], str]:
    return lambda v: v is None or _is(v, (int, float)) and not (positive and v <= 0), words


def _is(value: object, kind: type | tuple[type, ...]) -> bool:
    return isinstance(value, kind) and not isinstance(value, bool)  # `batch_size: true` is a mistake, not 1


# data.KEY: (a test of its value, what is allowed); checked in this order.
_OPTIONS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "batch_size": _int(1), "eval_batch_size": _int(1, null=True), "num_workers": _int(0),
    "augment_shift": _int(0, 27), "n_classes": _int(2, null=True),
    "val_size": (lambda v: _is(v, int) and v >= 1 or isinstance(v, float) and 0.0 < v < 1.0,
                 "a count >= 1 or a fraction in (0, 1)"),
    "mean": _number("null (the data set's) or a number"),
    "std": _number("null (the data set's) or a number > 0", positive=True),
    # A bare string would be iterated letter by letter as a list of "mirrors".
    "mirrors": (lambda v: v is None or isinstance(v, Sequence) and not isinstance(v, (str, bytes)),
                "null or a list of URLs"),
}


class IdxOptions:
    """Checked ``data.*`` options; a data module class puts this first among its bases.

    Args:
        data_dir: the folder of the four IDX files (.gz or not); None: ``$MODELFORGE_DATA``, else the user cache.
        batch_size: training batch size; ``eval_batch_size``: validation and test (None: the same).
        val_size: held out of the training images: a count, or a fraction like 0.1.
        seed: the train/val split and the shuffling (the run's top-level ``seed`` in a config).
        num_workers: DataLoader workers (a batch is one tensor slice: workers rarely help).
        augment_shift: the largest random shift of a training image, in pixels; 0: off.
        normalize: ``(x/255 - mean) / std``; ``mean``/``std`` None: the data set's (computed for ``idx``).
        n_classes: None: the data set's (for ``idx``, the largest training label + 1).
        download: fetch missing files from ``mirrors`` (None: the data set's); ``verify``: check their md5s.
        drop_last: leave out the ragged last training batch of each epoch (static batch shapes: ``cuda_graph=true``
            sets it); the images it leaves out differ from epoch to epoch, as the order does.
        cache_decoded: no effect (kept so older configs load). ``timeout``: seconds a download may wait.
    """

    def __init__(self, data_dir: str | Path | None = None, batch_size: int = 128, eval_batch_size: int | None = None,
                 val_size: int | float = 5000, seed: int = 0, num_workers: int = 0, augment_shift: int = 0,
                 normalize: bool = True, mean: float | None = None, std: float | None = None,
                 n_classes: int | None = None, download: bool = True, verify: bool = True, cache_decoded: bool = True,
                 mirrors: Sequence[str] | None = None, timeout: float = 30.0, drop_last: bool = False) -> None:
        super().__init__()  # the LightningDataModule after this class in the bases
        for key, (accepts, allowed) in _OPTIONS.items():
            if not accepts(value := locals()[key]):
                raise ConfigError(f"data.{key}", f"got {value!r}", allowed=allowed,
                                  hint="data.mirrors=[https://example.org/mnist/]" if key == "mirrors" else None)
        for url in mirrors or ():
            if not str(url).startswith(("http://", "https://", "file:")):
                raise ConfigError("data.mirrors", f"{url!r} is not a URL", allowed="http://, https:// or file: URLs")
        if getattr(self, "dataset", None) is None and not data_dir:  # `idx`: no known data set, no default folder
            raise ConfigError("data.data_dir", "missing: the folder that holds the four IDX files",
                              hint="data=idx data.data_dir=/path/to/folder (train-images-idx3-ubyte[.gz], ...)")
        self.data_dir, self.seed, self.val_size = data_dir, seed, val_size
        self.batch_size, self.eval_batch_size = batch_size, eval_batch_size or batch_size
        self.num_workers, self.augment_shift, self.normalize = num_workers, augment_shift, normalize
        self.mean, self.std, self._n_classes = mean, std, n_classes
        self.download, self.verify, self.timeout = download, verify, timeout  # cache_decoded: no effect
        self.drop_last = drop_last
        # Hydra hands over a ListConfig; a tuple keeps the module picklable and printable.
        self.mirrors = tuple(str(m) for m in mirrors) if mirrors is not None else None


def store_data_defaults(names: Sequence[str] = ("mnist", "fashion_mnist", "idx")) -> None:
    """Put the options' defaults in Hydra's ConfigStore as ``data_defaults/<name>`` (``name`` first)."""
    from hydra.core.config_store import ConfigStore

    from modelforge.config import schema_defaults, schema_from_signature

    defaults = schema_defaults(schema_from_signature(IdxOptions, "idx"))
    for name in names:
        ConfigStore.instance().store(group=DEFAULTS_GROUP, name=name, node={**defaults, "name": name},
                                     provider="modelforge")


store_data_defaults()  # on import, as the models' and hooks' defaults: `import modelforge` does it

"""The options of the data modules (``data.*``): one signature each holds their defaults, with no Lightning.

``IdxDataModule`` takes its options from :class:`IdxOptions`, ``ImageFolderDataModule`` from
:class:`ImageFolderOptions`; Hydra's ``data_defaults/<name>`` nodes are made from the same signatures on
``import modelforge`` (``conf/data/mnist.yaml`` starts from ``/data_defaults/mnist``), so no default is written
twice and composing a config loads no Lightning.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from modelforge.errors import ConfigError
from modelforge.registry import store_defaults

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


class DerivedOptions(IdxOptions):
    """``IdxOptions`` and the size of a set derived from MNIST's images (``mnist_segment``, ``mnist_denoise``,
    ``mnist_multilabel``, ``mnist_sum``): ``n_train`` samples made from the training images (``val_size`` of them
    held out), ``n_test`` from the test images; ``noise``: the denoising set's Gaussian noise (std, pixels in
    [0, 1]). Batches of 32, not MNIST's 128: 344 steps an epoch, as these tasks learn by the step (600 steps of 32
    took the default U-Net to mIoU 0.90, 200 of 128 left it at 0.19: docs/tasks.md#figures)."""

    def __init__(self, *args: Any, n_train: int = 12000, n_test: int = 2000, noise: float = 0.3,
                 val_size: int | float = 1000, batch_size: int = 32, **kwargs: Any) -> None:
        super().__init__(*args, val_size=val_size, batch_size=batch_size, **kwargs)
        for key, value in (("n_train", n_train), ("n_test", n_test)):
            if not _is(value, int) or value < 2:
                raise ConfigError(f"data.{key}", f"got {value!r}", allowed="an integer >= 2")
        if not _is(noise, (int, float)) or not 0.0 <= noise <= 1.0:
            raise ConfigError("data.noise", f"got {noise!r}", allowed="a number in [0, 1]")
        self.n_train, self.n_test, self.noise = n_train, n_test, float(noise)


def _derived_signature() -> inspect.Signature:
    """IdxOptions' parameters (val_size 1000: the derived sets are smaller; batch_size 32) and DerivedOptions' own:
    one signature that the data defaults and the option checks read."""
    changed = {"val_size": 1000, "batch_size": 32}
    base = [p.replace(default=changed[p.name]) if p.name in changed else p
            for p in inspect.signature(IdxOptions.__init__).parameters.values()]
    own = [p for p in inspect.signature(DerivedOptions.__init__).parameters.values() if p.kind is p.KEYWORD_ONLY
           and p.name not in changed]
    return inspect.Signature([*base, *(p.replace(kind=p.POSITIONAL_OR_KEYWORD) for p in own)])


DerivedOptions.__init__.__signature__ = _derived_signature()  # type: ignore[attr-defined]
DERIVED_SETS = ("mnist_segment", "mnist_denoise", "mnist_multilabel", "mnist_sum")
DIGITS = tuple(str(k) for k in range(10))
# What each index of a derived set's output means (the denoising set's output is an image).
DERIVED_CLASS_NAMES = {"mnist_segment": ("background", *DIGITS), "mnist_multilabel": DIGITS, "mnist_sum": ("sum",)}


INTERPOLATIONS = ("bilinear", "bicubic")
# torchvision's ImageNet statistics (its weights' transforms): the default of data=image_folder.
IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)

# data.KEY of image_folder: (a test of its value, what is allowed); checked in this order.
_IMAGE_OPTIONS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "batch_size": _int(1), "eval_batch_size": _int(1, null=True), "num_workers": _int(0),
    "image_size": _int(8), "resize_size": _int(8), "n_classes": _int(2, null=True),
    "val_size": (lambda v: _is(v, float) and 0.0 < v < 1.0, "a fraction in (0, 1), like 0.1"),
    "test_size": (lambda v: _is(v, (int, float)) and 0.0 <= v < 1.0, "0 (test on the validation images) or a "
                                                                     "fraction in (0, 1)"),
    "interpolation": (lambda v: v in INTERPOLATIONS, " or ".join(INTERPOLATIONS)),
    "random_resized_crop": (lambda v: v is None or isinstance(v, Sequence) and len(v) == 2
                            and all(_is(x, (int, float)) for x in v) and 0.0 < v[0] <= v[1] <= 1.0,
                            "null (off) or [min, max] fractions of the image's area, 0 < min <= max <= 1"),
    "mean": (lambda v: v is None or _numbers(v), "null (ImageNet's) or one number per channel"),
    "std": (lambda v: v is None or _numbers(v) and all(x > 0 for x in v), "null (ImageNet's) or one number > 0 "
                                                                          "per channel"),
    "classes": (lambda v: v is None or isinstance(v, Sequence) and not isinstance(v, str) and len(v) >= 1
                and all(isinstance(c, str) and c for c in v) and len(set(v)) == len(v),
                "null (the class folders, sorted) or a list of distinct folder names"),
}


def _numbers(value: Any) -> bool:
    return isinstance(value, Sequence) and not isinstance(value, str) and len(value) >= 1 and all(
        _is(x, (int, float)) for x in value)


class ImageFolderOptions:
    """Checked ``data.*`` options of ``data=image_folder``; a data module class puts this first among its bases.

    Args:
        root: a folder of class folders of images (torchvision's ImageFolder layout), or of ``train/``, ``val/``
            and ``test/`` folders of class folders.
        batch_size: training batch size; ``eval_batch_size``: validation and test (None: the same).
        val_size: the fraction of each class held out for validation when there is no ``val/`` folder.
        test_size: the fraction of each class held out for the test when there is no ``test/`` folder;
            0: the test runs on the validation images (and says so).
        seed: the split (the run's top-level ``seed`` in a config).
        num_workers: DataLoader worker processes that decode the images.
        image_size: the side of the square crop the model sees; ``resize_size``: the shorter side images are
            resized to before the center crop of validation and test (torchvision's weights: 224 and 256).
        interpolation: ``bilinear`` or ``bicubic`` (Pillow's, antialiased).
        mean, std: per channel, of pixels in [0, 1]; None: ImageNet's (their averages for ``grayscale``).
        normalize: ``(x - mean) / std``; false feeds pixels in [0, 1].
        grayscale: one channel instead of RGB.
        random_resized_crop: training crops of a random part of each image (``[min, max]`` of its area, aspect
            3/4 to 4/3) resized to ``image_size``; None: the validation's resize and center crop.
        horizontal_flip: flip half the training images left to right.
        classes: the class folders, in the order of the labels; None: every folder, sorted by name (a run
            records the list in its config, so its checkpoint keeps its class names and order).
        n_classes: None: the number of classes; more gives the model that many outputs.
        drop_last: leave out the ragged last training batch of each epoch.
    """

    def __init__(self, root: str | Path | None = None, batch_size: int = 32, eval_batch_size: int | None = None,
                 val_size: float = 0.1, test_size: float = 0.0, seed: int = 0, num_workers: int = 2,
                 image_size: int = 224, resize_size: int = 256, interpolation: str = "bilinear",
                 mean: Sequence[float] | None = None, std: Sequence[float] | None = None, normalize: bool = True,
                 grayscale: bool = False, random_resized_crop: Sequence[float] | None = (0.08, 1.0),
                 horizontal_flip: bool = True, classes: Sequence[str] | None = None, n_classes: int | None = None,
                 drop_last: bool = False) -> None:
        super().__init__()  # the LightningDataModule after this class in the bases
        values = locals()
        for key, (accepts, allowed) in _IMAGE_OPTIONS.items():
            if not accepts(value := values[key]):
                raise ConfigError(f"data.{key}", f"got {value!r}", allowed=allowed)
        if not root:
            raise ConfigError("data.root", "missing: the folder of class folders of images",
                              hint="data=image_folder data.root=/path/to/folder (one folder of images per class)")
        if resize_size < image_size:
            raise ConfigError("data.resize_size", f"{resize_size} is smaller than data.image_size={image_size}: the "
                              "center crop would not fit", allowed=f"an integer >= {image_size}")
        channels = 1 if grayscale else 3
        for key, given in (("mean", mean), ("std", std)):
            if given is not None and len(given) not in (1, channels):
                raise ConfigError(f"data.{key}", f"{list(given)} has {len(given)} values for {channels} channel(s)",
                                  allowed=f"1 or {channels} numbers", hint="data.grayscale=true takes one")
        if classes is not None and n_classes is not None and n_classes < len(classes):
            raise ConfigError("data.n_classes", f"{n_classes} is fewer than the {len(classes)} data.classes")
        self.root, self.seed, self.val_size, self.test_size = Path(str(root)).expanduser(), seed, val_size, test_size
        self.batch_size, self.eval_batch_size = batch_size, eval_batch_size or batch_size
        self.num_workers, self.image_size, self.resize_size = num_workers, image_size, resize_size
        self.interpolation, self.normalize, self.grayscale = interpolation, normalize, grayscale
        self.mean = _per_channel(mean, IMAGENET_MEAN, channels)
        self.std = _per_channel(std, IMAGENET_STD, channels)
        self.random_resized_crop = tuple(float(v) for v in random_resized_crop) if random_resized_crop else None
        self.horizontal_flip, self.drop_last = horizontal_flip, drop_last
        self.classes = tuple(str(c) for c in classes) if classes is not None else None
        self._n_classes = n_classes


def _per_channel(given: Sequence[float] | None, imagenet: tuple[float, ...], channels: int) -> tuple[float, ...]:
    values = tuple(float(v) for v in given) if given is not None else imagenet if channels == 3 else (
        sum(imagenet) / 3,)
    return values * channels if len(values) == 1 else values


def store_data_defaults(names: Sequence[str] = ("mnist", "fashion_mnist", "idx")) -> None:
    """Put the options' defaults in Hydra's ConfigStore as ``data_defaults/<name>`` (``name`` first)."""
    from hydra.core.config_store import ConfigStore

    from modelforge.config import schema_defaults, schema_from_signature

    defaults = schema_defaults(schema_from_signature(IdxOptions, "idx"))
    for name in names:
        ConfigStore.instance().store(group=DEFAULTS_GROUP, name=name, node={**defaults, "name": name},
                                     provider="modelforge")
    derived = schema_defaults(schema_from_signature(DerivedOptions, "mnist_segment"))
    for name in DERIVED_SETS:
        ConfigStore.instance().store(group=DEFAULTS_GROUP, name=name, node={**derived, "name": name},
                                     provider="modelforge")
    ConfigStore.instance().store(group=DEFAULTS_GROUP, name="image_folder", provider="modelforge",
                                 node=schema_defaults(schema_from_signature(ImageFolderOptions, "image_folder")))


store_defaults(store_data_defaults)  # on import, as the models' and hooks' defaults: `import modelforge` does it

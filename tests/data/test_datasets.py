"""The data registry: known IDX sets told apart by checksum, any IDX folder, files decoded once."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from modelforge.data import mnist_files
from modelforge.data.build import build_datamodule
from modelforge.data.datasets import FASHION_MNIST, KNOWN_DATASETS, MNIST
from modelforge.errors import ConfigError, DataError
from modelforge.registry import DATAMODULES
from tests.data_helpers import write_idx_set, write_mnist_idx


def test_builtin_data_sets_are_registered_with_their_own_tables() -> None:
    assert {"mnist", "fashion_mnist", "idx"} <= set(DATAMODULES.names())
    assert [f.name for f in FASHION_MNIST.files] == [f.name for f in MNIST.files]  # same IDX layout
    assert {f.md5 for f in FASHION_MNIST.files}.isdisjoint(f.md5 for f in MNIST.files)
    assert FASHION_MNIST.n_classes == 10 and FASHION_MNIST.classes[9] == "Ankle boot"
    fashion = build_datamodule({"name": "fashion_mnist"})
    assert fashion.files == FASHION_MNIST.files and fashion.mirrors == FASHION_MNIST.mirrors
    assert fashion.normalization() == (FASHION_MNIST.mean, FASHION_MNIST.std)


def test_a_file_of_another_known_set_names_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The generated second set plays Fashion-MNIST: its md5s are the ones the checks know as Fashion-MNIST's.
    other = write_idx_set(tmp_path / "other", n_classes=10, size=(28, 28), n_train=10, n_test=10)
    monkeypatch.setattr("modelforge.data.mnist_files._KNOWN_BY_MD5", {f.md5: FASHION_MNIST.files[0] for f in other})
    mnist_table = write_mnist_idx(tmp_path / "mnist", n_train=10, n_test=10)
    with pytest.raises(DataError, match=r"(?s)train-images-idx3-ubyte: checksum mismatch.*not the original MNIST"
                                        r"\n  this is Fashion-MNIST: use data=fashion_mnist"):
        mnist_files.load_mnist(tmp_path / "other", files=mnist_table, download=False)


def test_a_file_of_an_unknown_set_says_how_to_use_it(tmp_path: Path) -> None:
    write_idx_set(tmp_path / "other")
    with pytest.raises(DataError, match=r"(?s)too long: expected.*hint: .*use data=idx data.data_dir=DIR"):
        mnist_files.load_mnist(tmp_path / "other", files=write_mnist_idx(tmp_path / "m", 4, 4), download=False)


def test_idx_folder_takes_shapes_classes_and_stats_from_its_files(tmp_path: Path) -> None:
    write_idx_set(tmp_path / "bars", n_classes=5, size=(20, 20))
    data = build_datamodule({"name": "idx", "data_dir": str(tmp_path / "bars"), "val_size": 8, "batch_size": 8})
    assert data.name == "idx" and data.input_shape == (1, 20, 20) and data.n_classes == 5
    assert not data.verify and not data.download  # nothing to check against, nowhere to fetch from
    images = mnist_files.load_mnist(tmp_path / "bars", verify=False, download=False, image_size=None,
                                    n_classes=None)["train"][0].float() / 255
    mean, std = data.normalization()
    assert mean == pytest.approx(float(images.mean())) and std == pytest.approx(float(images.std()))
    data.setup("fit")
    x, y = next(iter(data.train_dataloader()))
    assert x.shape == (8, 1, 20, 20) and int(y.max()) < 5
    everything = torch.cat([b[0] for b in data.train_dataloader()] + [b[0] for b in data.val_dataloader()])
    assert float(everything.mean()) == pytest.approx(0.0, abs=1e-4)  # normalized by its own stats
    given = build_datamodule({"name": "idx", "data_dir": str(tmp_path / "bars"), "mean": 0.5, "std": 0.25,
                              "n_classes": 7})
    assert given.normalization() == (0.5, 0.25) and given.n_classes == 7


@pytest.mark.parametrize(("cfg", "match"), [
    ({"name": "idx"}, r"data.data_dir: missing: the folder that holds the four IDX files"),
    ({"name": "fashion_mnst"}, r"(?s)data.name: unknown datamodule 'fashion_mnst'.*did you mean 'fashion_mnist'"),
    ({"name": "idx", "data_dir": "x", "n_clases": 3}, r"(?s)data.n_clases: data module 'idx' takes no option.*'n_classes'"),
    ({"name": "mnist", "dataset": "fashion_mnist"}, r"data.dataset: data module 'mnist' takes no option 'dataset'"),
    ({"name": "idx", "data_dir": "x", "std": 0}, r"data.std: got 0"),
    ({"name": "mnist", "batch_size": "big"}, r"data.batch_size: data module 'mnist' expects a number"),
])
def test_bad_data_options_are_named(cfg: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        build_datamodule(cfg)


def test_each_file_is_read_once_per_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """prepare_data, setup('fit'), prepare_data and setup('test') of a run, and a second run: 4 reads."""
    table = write_mnist_idx(tmp_path / "m", n_train=40, n_test=20)
    reads: list[str] = []
    real_read = mnist_files.read_file_bytes
    monkeypatch.setattr(mnist_files, "read_file_bytes", lambda path: reads.append(Path(path).name) or real_read(path))

    def one_run() -> None:
        data = build_datamodule({"name": "mnist", "data_dir": str(tmp_path / "m"), "val_size": 8})
        data.files = table
        data.prepare_data()  # the up-front check in train()
        data.prepare_data()  # Lightning's, in fit
        data.setup("fit")
        data.prepare_data()  # Lightning's, in test
        data.setup("test")

    monkeypatch.setattr(mnist_files, "_decoded_cache", {})
    one_run()
    one_run()
    assert sorted(reads) == sorted(f.name + ".gz" for f in table)  # each of the four files once
    # Without the cache (as before), every load reads all four files again.
    reads.clear()
    for _ in range(3):
        mnist_files._decoded_cache.clear()
        mnist_files.load_mnist(tmp_path / "m", files=table, download=False)
    assert len(reads) == 12


def test_a_changed_file_is_read_again(tmp_path: Path) -> None:
    table = write_mnist_idx(tmp_path / "m", n_train=10, n_test=10)
    first = mnist_files.load_mnist(tmp_path / "m", files=table, download=False)["train"][1]
    new_table = write_mnist_idx(tmp_path / "m", n_train=20, n_test=10, seed=3)  # same paths, new contents
    assert len(mnist_files.load_mnist(tmp_path / "m", files=new_table, download=False)["train"][1]) == 20
    assert len(first) == 10


def test_known_data_sets_are_the_registered_ones() -> None:
    assert set(KNOWN_DATASETS) <= set(DATAMODULES.names())

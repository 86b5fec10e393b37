"""The IDX data modules on generated files: splits, batches, normalization, augmentation, DDP, Trainer, registry."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import pytorch_lightning as pl
import torch
from pytorch_lightning.utilities.data import _update_dataloader
from torch import nn
from torch.utils.data import DistributedSampler

from modelforge.data import (
    FASHION_MNIST,
    FILE_NAMES,
    KNOWN_DATASETS,
    MNISTDataModule,
    build_datamodule,
    find_file,
    load_idx_set,
    random_shift,
)
from modelforge.errors import ConfigError, DataError
from modelforge.registry import DATAMODULES
from tests.helpers.mnist_idx import write_idx_set, write_mnist_idx


def make(mnist_dir, **kwargs) -> MNISTDataModule:
    folder, _ = mnist_dir
    options = {"data_dir": folder, "val_size": 16, "batch_size": 8, "download": False, "verify": False} | kwargs
    dm = MNISTDataModule(**options)
    dm.setup("fit")
    return dm


def keys(images: torch.Tensor) -> list[bytes]:
    return [img.contiguous().numpy().tobytes() for img in images]


def test_shapes_are_advertised() -> None:
    data = MNISTDataModule()  # instance properties: an idx folder reads its shapes from its files
    assert data.input_shape == (1, 28, 28) and data.n_classes == 10


@pytest.mark.parametrize("val_size", [16, 0.25])
def test_split_sizes_and_partition(mnist_dir, val_size: int | float) -> None:
    dm = make(mnist_dir, val_size=val_size)
    assert dm.check() == {"train": 48, "val": 16, "test": 32}
    assert (len(dm.train_set), len(dm.val_set), len(dm.test_set)) == (48, 16, 32)
    train, val = keys(dm.train_set.images), keys(dm.val_set.images)
    assert not set(train) & set(val)
    everything = torch.cat([dm.train_set.images, dm.val_set.images])
    paths = {name: find_file(mnist_dir[0], name) for name in FILE_NAMES}  # the same images, regrouped
    assert sorted(keys(everything)) == sorted(keys(load_idx_set(paths, None)["train"][0]))


def test_split_is_seeded(mnist_dir) -> None:
    a, b, c = make(mnist_dir, seed=1), make(mnist_dir, seed=1), make(mnist_dir, seed=2)
    assert torch.equal(a.val_set.images, b.val_set.images) and torch.equal(a.val_set.labels, b.val_set.labels)
    assert not torch.equal(a.val_set.images, c.val_set.images)


def test_batches_are_normalized_float_images_and_int64_labels(mnist_dir) -> None:
    dm = make(mnist_dir)
    x, y = next(iter(dm.val_dataloader()))
    assert x.shape == (8, 1, 28, 28) and x.dtype == torch.float32
    assert y.shape == (8,) and y.dtype == torch.int64
    raw = dm.val_set.images[:8].float()
    torch.testing.assert_close(x[:, 0], (raw / 255 - 0.1307) / 0.3081)
    assert torch.equal(y, dm.val_set.labels[:8])
    plain = make(mnist_dir, normalize=False)
    torch.testing.assert_close(next(iter(plain.val_dataloader()))[0][:, 0], raw / 255)


def test_single_items_match_batches(mnist_dir) -> None:
    dm = make(mnist_dir)
    x, y = dm.test_set[3]
    xb, yb = dm.test_set.__getitems__([3])
    assert x.shape == (1, 28, 28) and torch.equal(x, xb[0]) and y == yb[0]


def test_random_shift_is_a_shift_within_bounds() -> None:
    torch.manual_seed(0)
    images = torch.randint(1, 256, (32, 28, 28), dtype=torch.uint8)  # no zeros: fill is visible
    shifted = random_shift(images, 2)
    assert shifted.shape == images.shape and shifted.dtype == torch.uint8
    seen = set()
    for src, out in zip(images, shifted):
        matches = [(dy, dx) for dy in range(-2, 3) for dx in range(-2, 3) if torch.equal(out, _shift(src, dy, dx))]
        assert len(matches) == 1
        seen.add(matches[0])
    assert len(seen) > 5  # offsets vary per image
    assert random_shift(images, 0) is images


def _shift(image: torch.Tensor, dy: int, dx: int) -> torch.Tensor:
    out = torch.zeros_like(image)
    h, w = image.shape
    out[max(dy, 0):h + min(dy, 0), max(dx, 0):w + min(dx, 0)] = image[max(-dy, 0):h - max(dy, 0),
                                                                      max(-dx, 0):w - max(dx, 0)]
    return out


def test_augmentation_only_in_training(mnist_dir) -> None:
    torch.manual_seed(0)
    plain, augmented = make(mnist_dir), make(mnist_dir, augment_shift=3)
    index = list(range(16))
    xa, ya = augmented.train_set.__getitems__(index)
    xp, yp = plain.train_set.__getitems__(index)
    assert xa.shape == xp.shape and xa.dtype == xp.dtype and torch.equal(ya, yp)
    assert not torch.equal(xa, xp)
    for split in ("val_set", "test_set"):
        a, p = getattr(augmented, split).__getitems__(index), getattr(plain, split).__getitems__(index)
        assert torch.equal(a[0], p[0])


def test_eval_loaders_keep_order_and_train_loader_shuffles(mnist_dir) -> None:
    dm = make(mnist_dir, eval_batch_size=32)
    (x, y), = list(dm.test_dataloader())
    assert torch.equal(y, dm.test_set.labels)
    torch.manual_seed(0)
    train_labels = torch.cat([y for _, y in dm.train_dataloader()])
    assert len(train_labels) == 48 and not torch.equal(train_labels, dm.train_set.labels)
    assert torch.equal(train_labels.sort().values, dm.train_set.labels.sort().values)


def test_setup_moves_data_to_the_trainer_device(mnist_dir) -> None:
    # No GPU in CI: the "meta" device stands in for cuda; what matters is that the data follows
    # strategy.root_device, batches are made there, and workers are dropped.
    dm = make(mnist_dir, num_workers=2, augment_shift=2)
    dm.trainer = SimpleNamespace(strategy=SimpleNamespace(root_device=torch.device("meta")))
    dm.setup("fit")
    assert {s.images.device.type for s in (dm.train_set, dm.val_set, dm.test_set)} == {"meta"}
    loader = dm.train_dataloader()
    assert loader.num_workers == 0
    x, y = dm.train_set.__getitems__([0, 1, 2])
    assert x.device.type == "meta" and x.shape == (3, 1, 28, 28) and x.dtype == torch.float32


def test_workers_on_cpu_data(mnist_dir) -> None:
    dm = make(mnist_dir, num_workers=1)
    labels = torch.cat([y for _, y in dm.val_dataloader()])
    assert torch.equal(labels, dm.val_set.labels)


def test_each_ddp_rank_gets_its_own_slice(mnist_dir) -> None:
    # What Lightning does under DDP with use_distributed_sampler=True: re-create the loader around
    # a DistributedSampler. Batches must stay whole-batch fetches and the ranks must split the data.
    dm = make(mnist_dir)
    seen = []
    for rank in range(2):
        loader = _update_dataloader(dm.train_dataloader(), DistributedSampler(dm.train_set, 2, rank, seed=0))
        assert loader.batch_size == 8 and loader.collate_fn is dm.train_dataloader().collate_fn
        batches = list(loader)
        assert all(x.shape[1:] == (1, 28, 28) and x.dtype == torch.float32 for x, _ in batches)
        seen.append(keys(torch.cat([x for x, _ in batches])[:, 0]))
    assert len(seen[0]) == len(seen[1]) == 24 and not set(seen[0]) & set(seen[1])


@pytest.mark.parametrize(("key", "value", "match"), [
    ("batch_size", 0, r"data.batch_size: got 0\n  allowed: an integer >= 1"),
    ("batch_size", True, r"data.batch_size: got True"),
    ("eval_batch_size", 2.5, r"data.eval_batch_size: got 2.5"),
    ("num_workers", -1, r"data.num_workers: got -1"),
    ("augment_shift", 28, r"data.augment_shift: got 28\n  allowed: an integer in 0..27"),
    ("val_size", 1.5, r"data.val_size: got 1.5\n  allowed: a count >= 1 or a fraction in \(0, 1\)"),
    ("val_size", 0, r"data.val_size: got 0\n  allowed: a count >= 1"),
    ("val_size", True, r"data.val_size: got True"),
    ("std", -1.0, r"data.std: got -1.0\n  allowed: null \(the data set's\) or a number > 0"),
    ("mean", "x", r"data.mean: got 'x'"),
    ("val_size", "10%", r"data.val_size: got '10%'"),
    ("mirrors", "https://example.org/mnist/", r"data.mirrors: got 'https://example.org/mnist/'"),
    ("mirrors", ["example.org/mnist/"], r"data.mirrors: 'example.org/mnist/' is not a URL"),
])
def test_bad_options_are_config_errors(key: str, value: object, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        MNISTDataModule(**{key: value})


def test_val_size_too_large_for_the_data(mnist_dir) -> None:
    dm = MNISTDataModule(data_dir=mnist_dir[0], download=False, verify=False)  # val_size=5000 > 64 images
    with pytest.raises(ConfigError, match=r"data.val_size: 5000 holds out 5000 of the 64 training images"):
        dm.check()


def test_check_fails_fast_on_missing_files(tmp_path, refused_url: str) -> None:
    dm = MNISTDataModule(data_dir=tmp_path, mirrors=[refused_url])
    with pytest.raises(DataError, match=r"(?s)data_dir .*: train-images-idx3-ubyte.*127.0.0.1"):
        dm.prepare_data()


def test_dataloader_before_setup_is_explained() -> None:
    with pytest.raises(RuntimeError, match=r"setup\(\) must run before"):
        MNISTDataModule().train_dataloader()


class _Linear(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(28 * 28, 10))

    def _step(self, batch, stage: str):
        x, y = batch
        assert x.dtype == torch.float32 and x.shape[1:] == (1, 28, 28) and y.dtype == torch.int64
        logits = self.net(x)
        self.log(f"{stage}/acc", (logits.argmax(1) == y).float().mean())
        return nn.functional.cross_entropy(logits, y)

    def training_step(self, batch, batch_idx):
        return self._step(batch, "train")

    def validation_step(self, batch, batch_idx):
        self._step(batch, "val")

    def test_step(self, batch, batch_idx):
        self._step(batch, "test")

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=0.01)


def test_trainer_fits_the_generated_patterns(mnist_dir) -> None:
    pl.seed_everything(0, verbose=False)
    dm = MNISTDataModule(data_dir=mnist_dir[0], verify=False, val_size=16, batch_size=16, download=False,
                         augment_shift=1)
    trainer = pl.Trainer(max_epochs=15, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False)
    model = _Linear()
    trainer.fit(model, datamodule=dm)
    assert trainer.callback_metrics["val/acc"] >= 0.9
    assert trainer.test(model, datamodule=dm, verbose=False)[0]["test/acc"] >= 0.9


DDP_SCRIPT = """
import sys, torch, pytorch_lightning as pl
from torch import nn
from modelforge.data import MNISTDataModule
from tests.helpers.mnist_idx import write_mnist_idx

class Count(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.net, self.seen = nn.Linear(784, 10), 0
    def training_step(self, batch, batch_idx):
        x, y = batch
        self.seen += len(y)
        return nn.functional.cross_entropy(self.net(x.flatten(1)), y)
    def on_train_epoch_end(self):
        print(f"rank {self.global_rank} saw {self.seen}", flush=True)
    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)

if __name__ == "__main__":
    write_mnist_idx(sys.argv[1], n_train=80, n_test=20)
    dm = MNISTDataModule(data_dir=sys.argv[1], verify=False, val_size=16, batch_size=8, download=False)
    trainer = pl.Trainer(accelerator="cpu", devices=2, strategy="ddp", max_epochs=1, logger=False,
                         enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(Count(), datamodule=dm)
"""


@pytest.mark.slow
def test_real_ddp_splits_the_training_set(tmp_path: Path) -> None:
    script = tmp_path / "ddp_fit.py"
    script.write_text(DDP_SCRIPT)
    repo = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(repo), os.environ.get("PYTHONPATH")]))}
    out = subprocess.run([sys.executable, str(script), str(tmp_path / "mnist")], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    # Both ranks print to one pipe, so lines may interleave.
    assert sorted(re.findall(r"rank (\d) saw (\d+)", out.stdout)) == [("0", "32"), ("1", "32")]  # 64 images


@pytest.mark.parametrize("name", ["mnist", "fashion_mnist", "idx"])
def test_each_data_config_holds_the_constructors_defaults_once(name: str, mnist_dir) -> None:
    """conf/data/NAME.yaml starts from data_defaults/NAME, made from the signature: every option, its default."""
    import inspect

    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from modelforge.config import conf_dir

    text = (conf_dir() / "data" / f"{name}.yaml").read_text()
    assert "batch_size" not in text.split("defaults:")[1]  # no default written out again
    with initialize_config_dir(str(conf_dir()), version_base=None):
        cfg = compose("train", [f"data={name}", "seed=7", "data.data_dir=/somewhere"]).data
    options = OmegaConf.to_container(cfg, resolve=True)
    assert options.pop("name") == name
    params = inspect.signature(DATAMODULES.get(name)).parameters
    assert set(options) == set(params)
    assert options["seed"] == 7  # the run's top-level seed
    own = {"idx": {"verify": False, "download": False}}.get(name, {})  # a folder of yours: no md5s, no mirrors
    assert all(options[k] == own.get(k, params[k].default) for k in options if k not in ("seed", "data_dir"))
    if name != "mnist":
        return
    cfg = OmegaConf.create(options)
    cfg.data_dir, cfg.val_size, cfg.mirrors, cfg.seed = str(mnist_dir[0]), 0.25, ["http://127.0.0.1:1/"], 0
    cfg.verify = False
    dm = MNISTDataModule(**{k: v for k, v in cfg.items() if k != "name"})
    assert dm.mirrors == ("http://127.0.0.1:1/",) and dm.check()["val"] == 16


def test_builtin_data_sets_are_registered_by_importing_modelforge_data() -> None:
    assert {"mnist", "fashion_mnist", "idx"} <= set(DATAMODULES.names())
    assert set(KNOWN_DATASETS) <= set(DATAMODULES.names())
    fashion = build_datamodule({"name": "fashion_mnist"})
    assert fashion.name == "fashion_mnist" and fashion.class_names[9] == "Ankle boot"
    assert fashion.normalization() == (FASHION_MNIST.mean, FASHION_MNIST.std)


def test_fashion_mnist_fetches_from_its_own_mirrors(tmp_path: Path) -> None:
    data = build_datamodule({"name": "fashion_mnist", "data_dir": str(tmp_path), "download": False})
    with pytest.raises(DataError, match=r"(?s)^Fashion-MNIST files missing from data_dir .*"
                                        r"hint: put .* from http://fashion-mnist.s3-website"):
        data.check()


def test_fashion_mnist_without_files_or_network_names_the_offline_ways(tmp_path: Path) -> None:
    data = build_datamodule({"name": "fashion_mnist", "data_dir": str(tmp_path / "none"),
                             "mirrors": ["http://127.0.0.1:9/"]})  # a port that refuses: no network
    with pytest.raises(DataError) as missing:
        data.prepare_data()
    message = str(missing.value)
    assert "127.0.0.1:9/: unreachable" in message
    assert "into that folder, or point data.data_dir=/path/to/them at a folder that holds them\n" in message
    assert message.endswith("\n    or, offline, install Debian/Ubuntu's package: apt-get install dataset-fashion-mnist "
                            "(from the distribution's mirror), which puts them in /usr/share/datasets/fashion-mnist, "
                            "read when data.data_dir is unset")
    assert not (tmp_path / "none").exists()  # a failed fetch leaves no folder behind


def test_idx_folder_takes_shapes_classes_and_stats_from_its_files(tmp_path: Path) -> None:
    write_idx_set(tmp_path / "bars", n_classes=5, size=(20, 20))
    data = build_datamodule({"name": "idx", "data_dir": str(tmp_path / "bars"), "val_size": 8, "batch_size": 8})
    assert data.name == "idx" and data.input_shape == (1, 20, 20) and data.n_classes == 5
    paths = {name: find_file(tmp_path / "bars", name) for name in FILE_NAMES}
    images = load_idx_set(paths, None)["train"][0].float() / 255
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


def test_idx_folder_is_never_checked_against_checksums_nor_fetched(tmp_path: Path, serve_dir) -> None:
    write_idx_set(tmp_path / "bars")  # verify and download stay at their defaults (true): no effect for idx
    assert build_datamodule({"name": "idx", "data_dir": str(tmp_path / "bars"), "val_size": 8}).check()["val"] == 8
    served = tmp_path / "served"
    write_mnist_idx(served)
    data = build_datamodule({"name": "idx", "data_dir": str(tmp_path / "empty"), "mirrors": [serve_dir(served)]})
    with pytest.raises(DataError, match=r"^IDX files missing from data_dir"):
        data.check()
    assert not (tmp_path / "empty").exists()


@pytest.mark.parametrize(("cfg", "match"), [
    ({"name": "idx"}, r"data.data_dir: missing: the folder that holds the four IDX files"),
    ({"name": "fashion_mnst"}, r"(?s)data.name: unknown datamodule 'fashion_mnst'.*did you mean 'fashion_mnist'"),
    ({"name": "idx", "data_dir": "x", "n_clases": 3}, r"(?s)data.n_clases: data module 'idx' takes no option.*'n_classes'"),
    ({"name": "mnist", "dataset": "fashion_mnist"}, r"data.dataset: data module 'mnist' takes no option 'dataset'"),
    ({"name": "idx", "data_dir": "x", "std": 0}, r"data.std: got 0"),
    ({"name": "idx", "data_dir": "x", "n_classes": 0}, r"data.n_classes: got 0"),
    ({"name": "mnist", "eval_batch_size": 0}, r"data.eval_batch_size: got 0"),
    ({"name": "mnist", "batch_size": "big"}, r"data.batch_size: expected int or float, got str 'big'"),
])
def test_bad_data_options_are_named(cfg: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        build_datamodule(cfg)


def test_files_are_read_once_per_data_module(tmp_path: Path) -> None:
    write_mnist_idx(tmp_path / "m", n_train=40, n_test=20)
    data = build_datamodule({"name": "mnist", "data_dir": str(tmp_path / "m"), "val_size": 8, "verify": False})
    data.prepare_data()  # the up-front check in train()
    shutil.rmtree(tmp_path / "m")  # Lightning's prepare_data and setup of fit and test read nothing again
    data.prepare_data()
    data.setup("fit")
    data.prepare_data()
    data.setup("test")
    assert len(data.test_set) == 20


def test_a_new_data_module_reads_changed_files(tmp_path: Path) -> None:
    write_mnist_idx(tmp_path / "m", n_train=10, n_test=10)
    options = {"name": "mnist", "data_dir": str(tmp_path / "m"), "val_size": 2, "verify": False}
    assert build_datamodule(options).check()["train"] == 8
    write_mnist_idx(tmp_path / "m", n_train=20, n_test=10, seed=3)  # same paths, new contents
    assert build_datamodule(options).check()["train"] == 18


def test_cache_decoded_is_accepted_and_keeps_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    write_mnist_idx(tmp_path / "m", n_train=10, n_test=10)
    for keep in (True, False):
        options = {"name": "mnist", "data_dir": str(tmp_path / "m"), "val_size": 2, "cache_decoded": keep}
        assert build_datamodule({**options, "verify": False}).check()["train"] == 8
    assert not (tmp_path / "xdg").exists()

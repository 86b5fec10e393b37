"""create_model reuses a composition only while nothing it was composed from has changed."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from hydra.core.config_store import ConfigStore

from modelforge import ConfigError, create_model
from modelforge.models import compose_memo

MODEL_FILE = """defaults:
  - /model_defaults/graph@_here_
  - _self_
name: graph
nodes:
  flat: {{block: flatten}}
  fc: {{block: linear, args: {{out_features: {width}}}}}
"""


def params(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


@pytest.fixture(autouse=True)
def fresh_memo() -> None:
    compose_memo.cache_clear()


@pytest.fixture
def configs(tmp_path: Path) -> Path:
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "tiny.yaml").write_text(MODEL_FILE.format(width=16))
    return tmp_path


def test_a_second_call_reuses_the_composition_and_builds_a_new_model() -> None:
    first = create_model("resnet18", ["n_classes=7"], seed=0)
    second = create_model("resnet18", ["n_classes=7"], seed=0)
    assert compose_memo.cache_info() == compose_memo.CacheInfo(hits=1, misses=1, entries=1)
    assert first is not second and first.state_dict().keys() == second.state_dict().keys()
    assert all(torch.equal(a, b) for a, b in zip(first.state_dict().values(), second.state_dict().values()))
    with torch.no_grad():
        next(first.parameters()).add_(1.0)  # the two share nothing
    assert not torch.equal(next(first.parameters()), next(second.parameters()))


def test_other_overrides_compose_again() -> None:
    wide, narrow = create_model("mlp", ["hidden_sizes=[64]"]), create_model("mlp", ["hidden_sizes=[8]"])
    assert params(wide) > params(narrow)
    assert compose_memo.cache_info().misses == 2


def test_a_model_file_rewritten_at_once_with_the_same_size_is_read_again(configs: Path) -> None:
    """Two writes in one tick of the kernel's file clock share a stamp: the contents tell them apart."""
    path = configs / "model" / "tiny.yaml"
    stamp = path.stat().st_mtime_ns
    assert params(create_model("tiny", config_dir=configs)) == 784 * 16 + 16
    path.write_text(MODEL_FILE.format(width=32))  # same size
    os.utime(path, ns=(stamp, stamp))  # and the same stamp
    assert params(create_model("tiny", config_dir=configs)) == 784 * 32 + 32
    assert compose_memo.cache_info().hits == 0


def test_a_model_file_changed_long_ago_is_seen_by_its_stamp(configs: Path) -> None:
    path = configs / "model" / "tiny.yaml"
    os.utime(path, ns=(10**18, 10**18))  # 2001: too old to be hashed
    assert params(create_model("tiny", config_dir=configs)) == 784 * 16 + 16
    path.write_text(MODEL_FILE.format(width=8).replace("width", "width "))
    os.utime(path, ns=(10**18 + 1, 10**18 + 1))
    assert params(create_model("tiny", config_dir=configs)) == 784 * 8 + 8
    assert params(create_model("tiny", config_dir=configs)) == 784 * 8 + 8
    assert compose_memo.cache_info() == compose_memo.CacheInfo(hits=1, misses=2, entries=2)


def test_a_new_file_in_the_folder_is_seen(configs: Path) -> None:
    create_model("tiny", config_dir=configs)
    (configs / "blocks").mkdir()
    (configs / "blocks" / "unused.yaml").write_text("{}\n")
    create_model("tiny", config_dir=configs)
    assert compose_memo.cache_info().hits == 0


def test_a_structured_config_stored_again_is_composed_again() -> None:
    store = ConfigStore.instance()
    try:
        store.store(group="model", name="stored_mlp", node={"name": "mlp", "hidden_sizes": [16]})
        assert params(create_model("stored_mlp")) == params(create_model("mlp", ["hidden_sizes=[16]"]))
        store.store(group="model", name="stored_mlp", node={"name": "mlp", "hidden_sizes": [4]})
        assert params(create_model("stored_mlp")) == params(create_model("mlp", ["hidden_sizes=[4]"]))
    finally:  # the model group's options are the shipped ones for the tests after this one (--help lists them)
        store.repo["model"].pop("stored_mlp.yaml", None)


def test_a_value_that_calls_a_resolver_is_resolved_on_every_call(configs: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    (configs / "model" / "from_env.yaml").write_text(
        MODEL_FILE.format(width="'${oc.decode:${oc.env:MF_TEST_WIDTH}}'"))
    monkeypatch.setenv("MF_TEST_WIDTH", "4")
    assert params(create_model("from_env", config_dir=configs)) == 784 * 4 + 4
    monkeypatch.setenv("MF_TEST_WIDTH", "6")
    assert params(create_model("from_env", config_dir=configs)) == 784 * 6 + 6
    assert compose_memo.cache_info().hits == 1  # composed once, resolved twice


def test_a_refused_composition_is_not_kept() -> None:
    for _ in range(2):
        with pytest.raises(ConfigError, match="hidden_sizez"):
            create_model("mlp", ["hidden_sizez=[4]"])
    assert compose_memo.cache_info() == compose_memo.CacheInfo(hits=0, misses=0, entries=0)


def test_the_memo_keeps_at_most_its_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(compose_memo, "MAX_ENTRIES", 2)
    for width in (2, 3, 4):
        create_model("mlp", [f"hidden_sizes=[{width}]"])
    assert compose_memo.cache_info().entries == 2
    create_model("mlp", ["hidden_sizes=[2]"])  # the oldest was let go
    assert compose_memo.cache_info().misses == 4


def test_a_model_file_that_is_not_yaml_is_one_error_naming_its_line(configs: Path) -> None:
    (configs / "model" / "bad.yaml").write_text(MODEL_FILE.format(width="${x}"))  # a brace in a flow mapping
    with pytest.raises(ConfigError) as caught:
        create_model("bad", config_dir=configs)
    assert str(caught.value).startswith(f"{configs / 'model' / 'bad.yaml'}:7:")
    assert "invalid YAML" in str(caught.value)


def test_a_folder_linked_into_itself_is_read_once(configs: Path) -> None:
    (configs / "model" / "loop").symlink_to(configs)  # model/loop/model/loop/...: a scan must end
    assert params(create_model("tiny", config_dir=configs)) == 784 * 16 + 16
    assert params(create_model("tiny", config_dir=configs)) == 784 * 16 + 16
    assert compose_memo.cache_info().hits == 1


def test_a_file_put_in_place_with_its_old_size_and_stamp_is_seen(configs: Path) -> None:
    """cp -p, rsync -a and tar x keep the size and mtime; the inode and change time differ."""
    path = configs / "model" / "tiny.yaml"
    os.utime(path, ns=(10**18, 10**18))
    assert params(create_model("tiny", config_dir=configs)) == 784 * 16 + 16
    replacement = configs / "new.yml.part"
    replacement.write_text(MODEL_FILE.format(width=64))  # same size
    os.utime(replacement, ns=(10**18, 10**18))
    os.replace(replacement, path)
    assert params(create_model("tiny", config_dir=configs)) == 784 * 64 + 64


def test_a_defaults_list_that_calls_a_resolver_is_composed_on_every_call(configs: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    (configs / "blocks").mkdir()
    for width in (5, 7):
        (configs / "blocks" / f"w{width}.yaml").write_text(f"fc: {{block: linear, args: {{out_features: {width}}}}}\n")
    (configs / "model" / "picked.yaml").write_text(
        "defaults:\n  - /model_defaults/graph@_here_\n  - /blocks@nodes: ${oc.env:MF_TEST_BLOCK}\n  - _self_\n"
        "name: graph\nnodes:\n  flat: {block: flatten}\n")
    for width in (5, 7, 5):
        monkeypatch.setenv("MF_TEST_BLOCK", f"w{width}")
        assert params(create_model("picked", config_dir=configs)) == 28 * width + width  # fc reads [B, 1, 28, 28]
    assert compose_memo.cache_info() == compose_memo.CacheInfo(hits=0, misses=3, entries=0)


def test_a_cached_resolver_answers_anew_on_every_call(configs: Path) -> None:
    """A resolver registered with use_cache (as Hydra's now) keeps its answer in the config it resolved."""
    from omegaconf import OmegaConf

    widths = iter(range(2, 100))
    OmegaConf.register_new_resolver("mf_test_next_width", lambda: next(widths), use_cache=True, replace=True)
    (configs / "model" / "counted.yaml").write_text(MODEL_FILE.format(width="'${mf_test_next_width:}'"))
    try:
        assert [params(create_model("counted", config_dir=configs)) for _ in range(3)] == [784 * w + w
                                                                                           for w in (2, 3, 4)]
    finally:
        OmegaConf.clear_resolver("mf_test_next_width")


def test_overrides_given_as_a_generator_are_read_once() -> None:
    first = create_model("mlp", (o for o in ["hidden_sizes=[4]"]))
    assert params(first) == 784 * 4 + 4 + 4 * 10 + 10
    assert params(create_model("mlp", ["hidden_sizes=[4]"])) == params(first)


def test_a_shuffled_choice_is_composed_on_every_call() -> None:
    create_model("mlp", ["hidden_sizes=shuffle([4,5,6])"])
    create_model("mlp", ["hidden_sizes=shuffle([4,5,6])"])
    assert compose_memo.cache_info().entries == 0

"""init.from, init.map, init.strict, freeze and freeze_bn, and callbacks=[ema]: real Trainer runs on tiny IDX data."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir

from modelforge import CheckpointError, ConfigError, build_model
from modelforge.config import conf_dir, load_config, typed_train_config
from modelforge.deploy.load import resolve_checkpoint
from modelforge.train import evaluate, train
from modelforge.train.run_config import validate_run_config
from modelforge.train.transfer import apply_transfer, freeze
from tests.helpers.run_config import compose_train, tiny_cli_args

SMALL = ("model=cnn", "enc_sizes=[8,16]", "dec_sizes=[32]")  # BatchNorm after each conv (the cnn's default)
ENCODER = "model.encoder."


def _weights(run_dir: Path, key: str = "state_dict") -> dict[str, torch.Tensor]:
    return torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True)[key]


def _metrics(run_dir: Path) -> dict:
    return json.loads((run_dir / "metrics.json").read_text())


@pytest.fixture(scope="module")
def source_run(tiny_mnist: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A trained cnn: what the runs below start from."""
    run_dir = tmp_path_factory.mktemp("source")
    train(compose_train(tiny_mnist, *SMALL, "trainer.max_epochs=1", "optim.lr=3e-3"), run_dir=run_dir)
    return run_dir


@pytest.fixture(scope="module")
def finetuned(source_run: Path, tiny_mnist: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Started from ``source_run`` with the encoder frozen; validated mid-epoch, so the model is put back in
    train mode between batches."""
    run_dir = tmp_path_factory.mktemp("finetuned")
    train(compose_train(tiny_mnist, *SMALL, f"init.from={source_run}", "freeze=[encoder.*]", "trainer.max_epochs=2",
                        "trainer.val_check_interval=2", "optim.lr=3e-3"), run_dir=run_dir)
    return run_dir


def _plain(*overrides: str) -> dict:
    with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
        return load_config(compose("train", overrides=list(overrides)))


def test_frozen_tensors_stay_bit_identical_and_the_rest_trains(source_run: Path, finetuned: Path) -> None:
    before, after = _weights(source_run), _weights(finetuned)
    encoder = [k for k in before if k.startswith(ENCODER)]
    # BatchNorm statistics too: the frozen norms stayed in eval mode, through two epochs and mid-epoch validations
    assert {k.rsplit(".", 1)[1] for k in encoder} >= {"weight", "bias", "running_mean", "running_var",
                                                      "num_batches_tracked"}
    assert all(torch.equal(before[k], after[k]) for k in encoder)
    assert all(not torch.equal(before[k], after[k]) for k in before if not k.startswith(ENCODER))
    assert _metrics(finetuned)["status"] == "finished"


def test_the_log_and_metrics_json_report_what_was_loaded_and_frozen(source_run: Path, finetuned: Path) -> None:
    log = (finetuned / "train.log").read_text()
    chosen, which = resolve_checkpoint(source_run)  # the run's checkpoint load_model would take too
    assert f"init.from: loaded 18 of the model's 18 tensors from {chosen} ({which})" in log
    assert "freeze ['encoder.*']: 8 parameter tensors, 1,296 of 26,746 params (25,450 trainable)" in log
    assert "norm layers kept in eval mode (statistics frozen): encoder.0.norm, encoder.1.norm" in log
    metrics = _metrics(finetuned)
    assert metrics["init"] == {"from": str(chosen), "weights": "trained", "loaded": 18,
                               **{k: {"count": 0, "first": []} for k in ("missing", "unexpected", "reshaped")}}
    assert metrics["frozen"] == {"globs": ["encoder.*"], "tensors": 8, "trainable_params": 25450,
                                 "norms_in_eval": ["encoder.0.norm", "encoder.1.norm"]}


@pytest.mark.parametrize("freeze_bn", [True, False])
def test_frozen_norms_train_in_eval_mode_unless_freeze_bn_is_false(freeze_bn: bool, source_run: Path, tiny_mnist: Path,
                                                                    tmp_path: Path, monkeypatch) -> None:
    from modelforge.train.module import ClassifierModule

    modes, step = [], ClassifierModule.training_step

    def recording_step(self, batch, batch_idx):
        modes.append((self.model.encoder[0].norm.training, self.model.encoder[1].norm.training, self.model.training))
        return step(self, batch, batch_idx)

    monkeypatch.setattr(ClassifierModule, "training_step", recording_step)
    train(compose_train(tiny_mnist, *SMALL, f"init.from={source_run}", "freeze=[encoder.*]", f"freeze_bn={freeze_bn}",
                        "trainer.max_epochs=1", "trainer.val_check_interval=2"), run_dir=tmp_path)
    assert modes == [(not freeze_bn, not freeze_bn, True)] * 4  # 128 images in batches of 32; validated after 2
    before, after = _weights(source_run), _weights(tmp_path)
    assert torch.equal(before[ENCODER + "0.norm.weight"], after[ENCODER + "0.norm.weight"])
    stats = ENCODER + "0.norm.running_mean"
    assert torch.equal(before[stats], after[stats]) == freeze_bn
    assert _metrics(tmp_path)["frozen"]["norms_in_eval"] == (["encoder.0.norm", "encoder.1.norm"] if freeze_bn else [])
    # 4 batches: the norms that train keep 0.9 ** 4 of the loaded statistics, and the run says so before training
    warned = [line for line in (tmp_path / "train.log").read_text().splitlines() if "BatchNorm layers train" in line]
    chosen, _ = resolve_checkpoint(source_run)
    assert [line.split("] - ", 1)[-1] for line in warned] == ([] if freeze_bn else [
        f"init.from: 2 BatchNorm layers train for 4 batches only: with momentum 0.1, 66% of their running statistics "
        f"will still come from {chosen}'s data, and evaluation normalizes with them; train 44 batches or more, or "
        "freeze those layers (freeze=[...] keeps their statistics)"])


def test_mismatches_are_reported_by_kind_with_their_first_names(source_run: Path) -> None:
    model = build_model({"name": "cnn", "enc_sizes": [8, 16], "dec_sizes": [24, 12]})
    transfer = apply_transfer({"init": {"from": str(source_run / "checkpoints" / "last.ckpt")}}, model)
    report = transfer.init
    assert report.loaded == tuple(f"encoder.{i}.{k}" for i in (0, 1) for k in (
        "conv.weight", "conv.bias", "norm.weight", "norm.bias", "norm.running_mean", "norm.running_var",
        "norm.num_batches_tracked")) + ("head.bias",)  # same shape: loaded, though its head.weight is not
    assert report.missing == ("decoder.1.linear.weight", "decoder.1.linear.bias")
    assert report.reshaped == ("decoder.0.linear.weight [32, 784] vs [24, 784]", "decoder.0.linear.bias [32] vs [24]",
                               "head.weight [10, 32] vs [10, 12]")
    assert transfer.lines(model)[1:] == [
        "init.from: 2 missing from the file, left as initialized: decoder.1.linear.weight, decoder.1.linear.bias",
        ("init.from: 3 with other shapes, left as initialized: decoder.0.linear.weight [32, 784] vs [24, 784], "
         "decoder.0.linear.bias [32] vs [24], head.weight [10, 32] vs [10, 12]"),
    ]
    source = torch.load(source_run / "checkpoints" / "last.ckpt", weights_only=True)["state_dict"]
    assert torch.equal(model.state_dict()["encoder.1.conv.weight"], source["model.encoder.1.conv.weight"])


def test_strict_refuses_any_mismatch_in_one_error_before_the_run_starts(source_run: Path, tiny_mnist: Path,
                                                                        tmp_path: Path) -> None:
    cfg = compose_train(tiny_mnist, "model=cnn", "enc_sizes=[8,16]", "dec_sizes=[24]", f"init.from={source_run}",
                        "init.strict=true")
    with pytest.raises(CheckpointError, match=r"^init.from: .*\.ckpt does not fit this model exactly "
                                              r"\(init.strict=true\): 3 shapes differ \(decoder.0.linear.weight "
                                              r"\[32, 784\] vs \[24, 784\], .*\n  hint: init.strict=false"):
        train(cfg, run_dir=tmp_path / "run")
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("wrap", ["plain", "state_dict", "model", "module."])
def test_a_plain_state_dict_file_loads(wrap: str, tmp_path: Path) -> None:
    trained = build_model({"name": "cnn", "enc_sizes": [8]}, seed=1)
    weights = trained.state_dict()
    content = ({f"module.{k}": v for k, v in weights.items()} if wrap == "module." else
               weights if wrap == "plain" else {wrap: weights, "epoch": 3})
    torch.save(content, tmp_path / "weights.pt")
    model = build_model({"name": "cnn", "enc_sizes": [8]}, seed=2)
    transfer = apply_transfer({"init": {"from": str(tmp_path / "weights.pt"), "strict": True}}, model)
    assert transfer.init.loaded == tuple(weights) and transfer.init.averaging is None
    assert all(torch.equal(weights[k], v) for k, v in model.state_dict().items())


def test_init_map_renames_by_glob_and_drops_on_null(tmp_path: Path) -> None:
    weights = build_model({"name": "cnn", "enc_sizes": [8]}, seed=1).state_dict()
    renamed = {k.replace("encoder.", "backbone.").replace("head.", "classifier."): v for k, v in weights.items()}
    torch.save(renamed, tmp_path / "weights.pt")
    model = build_model({"name": "cnn", "enc_sizes": [8]}, seed=2)
    head = model.head.weight.detach().clone()
    init = {"from": str(tmp_path / "weights.pt"), "map": {"backbone.*": "encoder.*", "classifier.*": None}}
    report = apply_transfer({"init": init}, model).init
    assert report.missing == ("head.weight", "head.bias") and report.unexpected == ()
    assert torch.equal(model.encoder[0].conv.weight, weights["encoder.0.conv.weight"])
    assert torch.equal(model.head.weight, head)  # dropped from the file: left as initialized


@pytest.mark.parametrize(("init", "error", "match"), [
    ({"map": {"encodr.*": "encoder.*"}}, ConfigError,
     r"^init.map.encodr.\*: 'encodr.\*' matches no tensor of .*weights.pt\n  did you mean 'encoder.\*'\?"),
    ({"map": {"encoder.*": "x"}}, ConfigError, r"the two sides need the same wildcards"),
    ({"map": {"head.*": "decoder.0.linear.*"}}, ConfigError,
     r"^init.map: 'decoder.0.linear.weight' and 'head.weight' of .* would both load into 'decoder.0.linear.weight'$"),
    ({"map": {"head.*": 3}}, ConfigError, r"^init.map.head.\*: expected str or null, got int 3"),
    ({"strict": "maybe"}, ConfigError, r"^init.strict: expected bool, got str 'maybe'"),  # the schema's
    ({"stric": True}, ConfigError, r"^init.stric: no key 'stric' at 'init'\n  did you mean 'strict'\?"),
])
def test_bad_init_options_are_one_message(init: dict, error: type, match: str, tmp_path: Path) -> None:
    torch.save(build_model({"name": "cnn", "enc_sizes": [8]}).state_dict(), tmp_path / "weights.pt")
    with pytest.raises(error, match=match):  # typed as validate_run_config types it, then applied
        apply_transfer(typed_train_config({"init": {"from": str(tmp_path / "weights.pt"), **init}}),
                       build_model({"name": "cnn", "enc_sizes": [8]}))


def test_a_resumed_run_checks_init_from_but_takes_its_weights_from_ckpt_path(source_run: Path) -> None:
    model = build_model({"name": "cnn", "enc_sizes": [8, 16], "dec_sizes": [32]})
    before = {k: v.clone() for k, v in model.state_dict().items()}
    transfer = apply_transfer({"init": {"from": str(source_run)}, "freeze": ["encoder.*"]}, model, resuming=True)
    assert transfer.init is None and all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert transfer.lines(model)[0] == (f"init.from: {resolve_checkpoint(source_run)[0]} not loaded: this run resumes "
                                        "from ckpt_path, whose weights it continues")
    assert not model.encoder[0].conv.weight.requires_grad  # freezing applies to a resumed run as to the first
    with pytest.raises(CheckpointError, match=r"^init.from: no checkpoint file at"):
        apply_transfer({"init": {"from": str(source_run / "gone.ckpt")}}, model, resuming=True)


def test_bad_paths_and_files_are_clear_errors(tmp_path: Path) -> None:
    model = build_model({"name": "cnn", "enc_sizes": [8]})
    with pytest.raises(CheckpointError, match=r"^init.from: no checkpoint file at .*nowhere.ckpt$"):
        apply_transfer({"init": {"from": str(tmp_path / "nowhere.ckpt")}}, model)
    with pytest.raises(CheckpointError, match=r"^init.from: no checkpoint in run directory .*no checkpoints/ folder"):
        apply_transfer({"init": {"from": str(tmp_path)}}, model)
    torch.save([1, 2, 3], tmp_path / "list.pt")
    with pytest.raises(CheckpointError, match=r"^init.from: .*list.pt holds no weights: expected a modelforge"):
        apply_transfer({"init": {"from": str(tmp_path / "list.pt")}}, model)
    torch.save({"other.weight": torch.zeros(3)}, tmp_path / "other.pt")
    with pytest.raises(CheckpointError, match=r"^init.from: no tensor of .*other.pt fits this model: .*"
                                              r"1 not in this model \(other.weight\)"):
        apply_transfer({"init": {"from": str(tmp_path / "other.pt")}}, model)


def test_a_misspelt_init_from_is_named_whole_with_did_you_mean(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "runs" / "mnist").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    model = build_model({"name": "cnn", "enc_sizes": [8]})
    for resuming in (False, True):
        with pytest.raises(CheckpointError, match=rf"^init.from: no checkpoint file at {tmp_path}/runs/mnsit\n"
                                                  r"  did you mean 'runs/mnist'\?$"):
            apply_transfer({"init": {"from": "runs/mnsit"}}, model, resuming=resuming)
    with pytest.raises(CheckpointError, match=rf"^init.from: no checkpoint file at {tmp_path}/rnus/mnist\n"
                                              r"  did you mean 'runs'\?$"):
        apply_transfer({"init": {"from": "rnus/mnist"}}, model)


def test_a_misspelt_freeze_glob_is_one_error_with_did_you_mean_and_exit_2(run_main, tiny_mnist: Path,
                                                                           tmp_path: Path) -> None:
    result = run_main("train", *tiny_cli_args(tiny_mnist), "freeze=[encodr.*]", f"hydra.run.dir={tmp_path / 'run'}")
    assert result.returncode == 2
    assert result.stderr.startswith("error: freeze[0]: 'encodr.*' matches no parameter of CNN\n"
                                    "  did you mean 'encoder.*'?\n  allowed: module names: encoder, encoder.0, ")
    assert result.stderr.count("error:") == 1 and "Traceback" not in result.stderr
    assert not (tmp_path / "run").exists()


def test_freezing_everything_or_a_module_without_parameters_is_refused() -> None:
    model = build_model({"name": "cnn", "enc_sizes": [8]})
    with pytest.raises(ConfigError, match=r"^freeze: \['encoder', '\*'\] freezes every parameter"):
        freeze(model, ["encoder", "*"])
    with pytest.raises(ConfigError, match=r"^freeze\[0\]: 'encoder.0.act' matches no parameter"):
        freeze(model, ["encoder.0.act"])
    assert all(p.requires_grad for p in model.parameters())  # a refused freeze changes nothing


@pytest.mark.parametrize(("name", "glob"), [("lenet5", "nodes.zzz"), ("lenet5", "nodes.c"), ("cnn", "encodr.*"),
                                            ("resnet18", "nodes.layr1.*"), ("mlp", "hiden.*")])
def test_a_freeze_hint_is_the_models_own_and_is_taken(name: str, glob: str) -> None:
    """Issue 33.14: lenet5 'freeze=[nodes.zzz]' suggested nodes.*, which freezes every parameter, whose refusal then
    hinted at encoder.*, which lenet5 does not have."""
    model_cfg = _plain(f"model={name}")["model"]
    total = len(list(build_model(model_cfg).parameters()))
    with pytest.raises(ConfigError) as refused:
        freeze(build_model(model_cfg), [glob])
    suggested = refused.value.suggestions
    assert len(suggested) == 1
    frozen = freeze(build_model(model_cfg), suggested)  # taken: a part of the model, not all of it
    assert 0 < len(frozen.params) < total
    with pytest.raises(ConfigError, match=r"freezes every parameter") as everything:
        freeze(build_model(model_cfg), ["*"])
    example = everything.value.hint.removeprefix("freeze a part, e.g. freeze=[").removesuffix("]")
    assert 0 < len(freeze(build_model(model_cfg), [example]).params) < total


def test_composite_block_paths_freeze_whole_blocks_with_their_norms() -> None:
    plain = _plain("model=resnet18", "freeze=[nodes.stem,nodes.layer1.*]")
    run = validate_run_config({**plain, "data": {**plain["data"], "verify": False, "download": False}})
    frozen, model = run.transfer.frozen, run.network
    assert frozen.params[0] == "nodes.stem.conv.weight" and frozen.params[-1] == "nodes.layer1.1.conv2.norm.bias"
    assert len(frozen.params) == 3 + 2 * 2 * 3  # stem: conv + norm; layer1: 2 blocks of 2 (conv, norm)
    assert frozen.norms == ("nodes.stem.norm", *(f"nodes.layer1.{i}.conv{j}.norm" for i in (0, 1) for j in (1, 2)))
    assert all(p.requires_grad == (n not in frozen.params) for n, p in model.named_parameters())
    with pytest.raises(ConfigError, match=r"^freeze\[0\]: 'nodes.layr1.\*' matches no parameter of .*\n"
                                          r"  did you mean 'nodes.layer1.\*'\?"):
        freeze(build_model(plain["model"]), ["nodes.layr1.*"])




@pytest.fixture(scope="module")
def ema_run(tiny_mnist: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    run_dir = tmp_path_factory.mktemp("ema")
    train(compose_train(tiny_mnist, *SMALL, "callbacks=[ema]", "callbacks.ema.decay=0.5", "trainer.max_epochs=2",
                        "optim.lr=3e-3"), run_dir=run_dir)
    return run_dir


def test_an_ema_run_saves_the_average_as_state_dict_and_eval_uses_it(ema_run: Path, tiny_mnist: Path,
                                                                      tmp_path: Path, caplog) -> None:
    ckpt = torch.load(ema_run / "checkpoints" / "last.ckpt", weights_only=True)
    average, trained = ckpt["state_dict"], ckpt["current_model_state"]
    assert average.keys() == trained.keys()
    assert not torch.equal(average["model.head.weight"], trained["model.head.weight"])
    cfg = compose_train(tiny_mnist)
    cfg.ckpt_path = str(ema_run / "checkpoints" / "last.ckpt")
    with caplog.at_level("INFO", logger="modelforge.train.run"):
        results = evaluate(cfg, run_dir=tmp_path)
    assert f"evaluating the EMA weights of {cfg.ckpt_path} (the run averaged its weights" in caplog.text
    recorded = _metrics(ema_run)  # the run tested the averaged weights too (EMA puts them in at the end)
    assert results["test/loss"] == pytest.approx(recorded["test/loss"], rel=1e-5)
    assert json.loads((tmp_path / "eval_metrics.json").read_text())["weights"] == "EMA"


def test_an_ema_run_resumes(ema_run: Path, tiny_mnist: Path, tmp_path: Path) -> None:
    train(compose_train(tiny_mnist, *SMALL, "callbacks=[ema]", "callbacks.ema.decay=0.5", "trainer.max_epochs=3",
                      f"ckpt_path={ema_run / 'checkpoints' / 'last.ckpt'}"), run_dir=tmp_path)
    metrics = _metrics(tmp_path)
    assert metrics["status"] == "finished" and metrics["epochs_this_run"] == 1
    assert _weights(tmp_path)["model.head.weight"].shape == (10, 32)


def test_ema_with_freeze_keeps_the_frozen_tensors_exact(source_run: Path, tiny_mnist: Path, tmp_path: Path) -> None:
    """EMA's average of a constant drifts in float32 (0.999 * x + 0.001 * x != x); FrozenWeights puts it back."""
    train(compose_train(tiny_mnist, *SMALL, f"init.from={source_run}", "freeze=[encoder.*]", "callbacks=[ema]",
                        "trainer.max_epochs=2"), run_dir=tmp_path)
    before = _weights(source_run)
    for key in ("state_dict", "current_model_state"):
        after = _weights(tmp_path, key)
        assert all(torch.equal(before[k], after[k]) for k in before if k.startswith(ENCODER)), key
        assert not torch.equal(before["model.head.weight"], after["model.head.weight"]), key


def test_torchs_ema_of_a_constant_drifts_so_frozen_weights_need_putting_back() -> None:
    """Why FrozenWeights restores frozen tensors: when torch's EMA keeps a constant exact (a lerp would), it can go."""
    from torch.optim.swa_utils import get_ema_avg_fn

    x = torch.randn(10_000, generator=torch.Generator().manual_seed(0))
    average, update = x.clone(), get_ema_avg_fn(0.999)
    for _ in range(10):
        average = update(average, x, None)
    assert not torch.equal(average, x)


def test_init_from_an_ema_run_takes_its_averaged_weights_and_says_so(ema_run: Path) -> None:
    model = build_model({"name": "cnn", "enc_sizes": [8, 16], "dec_sizes": [32]})
    transfer = apply_transfer({"init": {"from": str(ema_run)}}, model)
    assert transfer.init.averaging == "EMA" and transfer.lines(model)[0].endswith(", its EMA weights)")
    average = _weights(ema_run)
    assert all(torch.equal(average[f"model.{k}"], v) for k, v in model.state_dict().items())

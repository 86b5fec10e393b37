"""export: each format written, loaded back and checked on the run's test images; metadata inside; one
message for a model a format cannot take, an unknown format, a missing onnxruntime; the CLI's exit codes."""

from __future__ import annotations

import inspect
import json
from pathlib import Path

import pytest
import torch
import yaml
from omegaconf import OmegaConf
from torch import nn

from modelforge import build_model, load_model
from modelforge.config import conf_dir
from modelforge.deploy import export as exporting
from modelforge.deploy.export import check_export, export
from modelforge.deploy.metadata import read_metadata
from modelforge.deploy.runtime import open_model
from modelforge.errors import ConfigError, DataError, ExportError, UnknownNameError
from tests.conftest import REAL_MNIST, run_cli
from tests.helpers.small_runs import HAS_ONNX, needs_onnx
from tests.helpers.run_config import compose_train

FORMATS = ["pt2", pytest.param("onnx", marks=needs_onnx), "torchscript"]


@pytest.fixture
def tiny_data(tiny_mnist: Path) -> Path:
    return tiny_mnist  # the data small_cnn_run trained on


@pytest.fixture
def run(small_cnn_run: Path) -> Path:
    return small_cnn_run


def _model_config(data: Path, *overrides: str) -> dict:
    return OmegaConf.to_container(compose_train(data, *overrides).model, resolve=True)


@pytest.mark.parametrize("format", FORMATS)
def test_each_format_is_written_loaded_back_and_checked(format: str, run: Path, tiny_data: Path, capsys) -> None:
    ckpt = run / "checkpoints" / "last.ckpt"
    path = export(ckpt, format)  # the run's own data folder: the test images it was trained beside
    assert path == run / "checkpoints" / f"last{exporting.FORMATS[format]}" and path.is_file()
    report = json.loads(path.with_name(path.name + ".check.json").read_text())
    assert report["passed"] and report["top1_agreement"] == 1.0 and report["max_abs_diff"] < 1e-4
    assert report["n_images"] == 64 and report["batch_sizes"] == [64, 1]  # all of them, then one: any batch size
    assert report["eager_top1_acc"] == report["exported_top1_acc"]
    out = capsys.readouterr().out
    assert f"exported cnn to {path} ({format}" in out and "check passed: max abs difference" in out
    model = load_model(ckpt)
    assert read_metadata(path) == model.modelforge_meta  # inside the file: no sidecar
    assert not list(path.parent.glob("*.modelforge.json"))
    x = torch.randn(7, 1, 28, 28)
    with torch.no_grad():
        torch.testing.assert_close(open_model(path)(x), model(x), atol=1e-5, rtol=0)


@needs_onnx
def test_a_fixed_batch_size_and_an_output_folder(run: Path, tmp_path: Path) -> None:
    import onnx

    path = export(run, "onnx", tmp_path, dynamic_batch=False, batch_size=5)
    assert path == tmp_path / "last.onnx"  # a run directory: its last checkpoint
    dims = onnx.load(str(path)).graph.input[0].type.tensor_type.shape.dim
    assert [d.dim_value for d in dims] == [5, 1, 28, 28]
    assert json.loads((tmp_path / "last.onnx.check.json").read_text())["batch_sizes"] == [5]


def test_a_mismatch_fails_with_exit_code_1_and_records_why(run: Path, monkeypatch, tmp_path: Path) -> None:
    path = export(run / "checkpoints" / "last.ckpt", "pt2", tmp_path, check=False)
    monkeypatch.setattr(exporting, "open_model", lambda p: (lambda x, chunk: open_model(p)(x, chunk) + 1e-3))
    with pytest.raises(ExportError, match=r"does not compute what the model computes: max abs difference 1\.00e-03 "
                                          r"\(atol 0\.0001, rtol 1e-05\), top-1 agreement 100\.00% \(64/64\)") as caught:
        check_export(load_model(run / "checkpoints" / "last.ckpt"), path, "pt2")
    assert caught.value.exit_code == 1
    assert json.loads(path.with_name(path.name + ".check.json").read_text())["passed"] is False


def test_bad_options_are_one_message_before_any_work(run: Path, tmp_path: Path) -> None:
    with pytest.raises(UnknownNameError, match=r"^format: unknown export format 'onnxx'\n  did you mean 'onnx'\?"):
        export(tmp_path / "not-even-there.ckpt", "onnxx")
    with pytest.raises(UnknownNameError, match=r"did you mean 'trace'\?"):
        export(run, "torchscript", method="trce")
    with pytest.raises(ConfigError, match=r"^atol: got -1\.0\n  allowed: a number > 0"):
        export(run, "pt2", atol=-1.0)
    with pytest.raises(ConfigError, match=r"^rtol: got -1e-05\n  allowed: a number >= 0"):
        export(run, "pt2", rtol=-1e-5)
    with pytest.raises(ConfigError, match=r"output: .*model\.onnx does not name a pt2 file"):
        export(run, "pt2", tmp_path / "model.onnx")


def test_missing_onnx_packages_name_the_extra(run: Path, monkeypatch) -> None:
    monkeypatch.setattr(exporting, "_missing_onnx", lambda: ["onnxruntime"])
    with pytest.raises(ExportError, match=r"format onnx needs onnxruntime .*pip install 'modelforge\[export\]'"):
        export(run, "onnx")


def test_the_check_needs_the_test_images(run: Path, tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"no t10k-images-idx3-ubyte\[\.gz\] in .*; give their folder with "
                                        r"data_dir=DIR, or skip the check with check=false"):
        export(run, "torchscript", tmp_path / "m.pt", data_dir=tmp_path)


class DataDependent(nn.Module):
    input_shape = (1, 28, 28)

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(784, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.flatten(1)
        if x.sum() > 0:  # control flow on a value: torch.export (and so ONNX) cannot follow it
            return self.fc(x)
        return -self.fc(x)


def test_a_model_a_format_cannot_take_is_one_message_with_the_formats_that_work(tmp_path: Path) -> None:
    with pytest.raises(ExportError, match=r"^format pt2: DataDependent cannot be exported: Could not guard on "
                                          r"data-dependent expression") as caught:
        export(DataDependent(), "pt2", tmp_path)
    assert str(caught.value).splitlines()[-1] == "  formats that work: torchscript"
    assert caught.value.exit_code == 2 and not list(tmp_path.iterdir())


class Zeta(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.special.zeta(x, torch.ones_like(x) + 1)  # no ONNX function for it


@needs_onnx
def test_an_op_onnx_lacks_is_said_in_the_exporters_words(tmp_path: Path) -> None:
    model = nn.Sequential(nn.Flatten(), nn.Linear(784, 10), Zeta())
    model.input_shape = (1, 28, 28)
    with pytest.raises(ExportError, match=r"^format onnx: Sequential cannot be exported: No ONNX function found "
                                          r"for <OpOverload\(op='prims\.zeta'") as caught:
        export(model, "onnx", tmp_path)
    assert str(caught.value).splitlines()[-1] == "  formats that work: pt2, torchscript"


def test_graph_models_trace_and_scripting_says_to_trace(tiny_data: Path, tmp_path: Path) -> None:
    model = build_model(config := _model_config(tiny_data, "model=graph"), seed=0)
    model.model_config = config  # a module built in Python: the metadata takes its config from here
    with pytest.raises(ExportError, match=r"torch\.jit\.script cannot compile GraphModel \(.*variable number of "
                                          r"arguments.*\); use method=trace \(the default\), which exports every"):
        export(model, "torchscript", tmp_path, method="script", check=False)
    path = export(model, "torchscript", tmp_path, data_dir=tiny_data)
    assert path == tmp_path / "graph.pt" and read_metadata(path)["model"]["name"] == "graph"
    assert json.loads((tmp_path / "graph.pt.check.json").read_text())["passed"]


def test_hook_plugins_are_never_exported(run: Path, tmp_path: Path) -> None:
    model = load_model(run)
    handle = model.head.register_forward_hook(lambda module, args, out: out * 0)  # as a plugin would
    x = torch.randn(3, 1, 28, 28)
    with torch.no_grad():
        assert not model(x).any()
        path = export(model, "pt2", tmp_path)  # the check compares with the model less its hooks: passes
        assert not model(x).any()  # the caller's module keeps its hook
        handle.remove()
        torch.testing.assert_close(open_model(path)(x), model(x), atol=1e-5, rtol=0)
    assert path.name == "last.pt2"


def test_export_yaml_holds_the_functions_defaults() -> None:
    conf = yaml.safe_load((conf_dir() / "export.yaml").read_text())
    defaults = {name: p.default for name, p in inspect.signature(export).parameters.items() if name != "model_or_path"}
    assert {k: v for k, v in conf.items() if k not in ("defaults", "hydra", "ckpt_path")} == defaults


def test_the_cli_exports_refuses_and_fails_with_its_exit_codes(run: Path, run_main, monkeypatch, tmp_path: Path) -> None:
    ckpt = run / "checkpoints" / "last.ckpt"
    done = run_main("export", f"ckpt_path={ckpt}", "format=torchscript", "n_images=32", f"output={tmp_path}/")
    assert done.returncode == 0, done.stderr
    assert "top-1 agreement 100.00% (32/32)" in done.stdout and (tmp_path / "last.pt").is_file()
    refused = run_main("export", f"ckpt_path={ckpt}", "format=onnxx")
    assert refused.returncode == 2
    assert "error: format: unknown export format 'onnxx'\n  did you mean 'onnx'?" in refused.stderr
    # a file that computes something else: the check fails the command, exit 1
    monkeypatch.setattr(exporting, "open_model", lambda p: (lambda x, chunk: open_model(p)(x, chunk) + 1e-3))
    mismatch = run_main("export", f"ckpt_path={ckpt}", "format=torchscript", "n_images=32", f"output={tmp_path}/",
                        "overwrite=true")
    assert mismatch.returncode == 1 and "does not compute what the model computes" in mismatch.stderr
    missing = run_main("export", f"ckpt_path={run / 'missing.ckpt'}")
    assert missing.returncode == 2 and f"error: ckpt_path: no checkpoint file at {run / 'missing.ckpt'}" in missing.stderr


@pytest.mark.e2e
def test_the_cli_in_a_process_of_its_own(run: Path, tmp_path: Path) -> None:
    done = run_cli("export", f"ckpt_path={run}", "format=pt2", f"output={tmp_path}", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "last.pt2").is_file() and sorted(p.name for p in tmp_path.iterdir()) == [
        "last.pt2", "last.pt2.check.json"]  # no log file, no outputs/ folder


@pytest.mark.slow
@pytest.mark.parametrize("format", FORMATS)
def test_the_resnet18_of_the_zoo_exports(format: str, tmp_path: Path) -> None:
    if not (REAL_MNIST / "t10k-images-idx3-ubyte.gz").is_file():
        pytest.skip(f"no real MNIST at {REAL_MNIST}")
    model = build_model(config := _model_config(REAL_MNIST, "model=resnet18"), seed=0)
    model.model_config = config
    path = export(model, format, tmp_path, data_dir=REAL_MNIST)
    report = json.loads(path.with_name(path.name + ".check.json").read_text())
    assert report["passed"] and report["n_images"] == 300


@pytest.mark.slow
def test_the_acceptance_run_on_real_mnist(tmp_path: Path) -> None:
    """The issue's acceptance, as written: a short `experiment=fast` run, then each format from the CLI."""
    if not (REAL_MNIST / "t10k-images-idx3-ubyte.gz").is_file():
        pytest.skip(f"no real MNIST at {REAL_MNIST}")
    env = {"MODELFORGE_DATA": str(REAL_MNIST)}
    run_dir = tmp_path / "r"
    trained = run_cli("train", "experiment=fast", "trainer.limit_train_batches=300", f"hydra.run.dir={run_dir}",
                      cwd=tmp_path, env=env, timeout=600)
    assert trained.returncode == 0, trained.stderr[-2000:]
    for format in ("onnx", "pt2", "torchscript") if HAS_ONNX else ("pt2", "torchscript"):
        done = run_cli("export", f"ckpt_path={run_dir}/checkpoints/last.ckpt", f"format={format}", cwd=tmp_path, env=env)
        assert done.returncode == 0, done.stderr[-2000:]
        file = run_dir / "checkpoints" / f"last{exporting.FORMATS[format]}"
        report = json.loads(file.with_name(file.name + ".check.json").read_text())
        assert report["max_abs_diff"] < 1e-4 and report["top1_agreement"] == 1.0 and report["n_images"] == 300
    refused = run_cli("export", f"ckpt_path={run_dir}/checkpoints/last.ckpt", "format=onnxx", cwd=tmp_path)
    assert refused.returncode == 2 and "did you mean 'onnx'?" in refused.stderr

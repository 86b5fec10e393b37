"""No file modelforge opens runs code: an exported .pt2, TorchScript or ONNX file, a checkpoint (.ckpt, a
torch.save .pt), the config stored in one, a YAML config. Each file carries a payload that writes a marker
file when a careless loader opens or runs it (tests/helpers/payloads.py makes them as an attacker would); each is
refused, through the CLI (exit 2, one line naming the file and why) and from Python, and the marker is never
written. Where torch itself runs the payload, a test pins that it still does: the day it stops, the check
that works around it can go."""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch
from PIL import Image

import modelforge
from modelforge.config import load_config
from modelforge.deploy.predict import predict
from modelforge.deploy.runtime import open_model
from modelforge.errors import CheckpointError, ConfigError
from tests.conftest import REPO
from tests.helpers import payloads
from tests.helpers.small_runs import needs_onnx, train_mlp
from tests.helpers.run_config import tiny_cli_args

# payload -> what the refusal says of the file
PT2_REFUSALS = {
    "pickled weight": r"holds a pickled weight 'offset' \(data/weights/weight_\d+\), which torch\.export\.load would "
                      r"unpickle with weights_only=False",
    "pickled constant": r"holds a pickled constant 'scale' \(data/constants/tensor_0\), which torch\.export\.load "
                        r"would unpickle with weights_only=False",
    "pickled sample inputs": r"holds sample inputs that torch's weights-only unpickler refuses",
    "opaque object constant": r"holds data/constants/opaque_obj_0: a pickled Python object, which "
                              r"torch\.export\.load would unpickle and so run; refused unopened",
    "torch.os.system node": r"has a program \(models/model\.json\) that calls 'torch\.os\.system' \(not an op of "
                            r"torch\.ops\.aten or prims\)",
    "aten.from_file node": r"has a program \(models/model\.json\) that calls 'torch\.ops\.aten\.from_file\.default' "
                           r"\(an op that reaches the file system\)",
    "guard code": r"has a program \(models/model\.json\) that carries guard code \(guards_code\), Python source "
                  r"that torch\.export\.load would run",
    "sympy shape expression": r"has a program \(models/model\.json\) that holds a shape expression that is not "
                              r"sympy arithmetic in graph_module/graph/tensor_values/",
    "legacy pickled weights": r"holds data/weights/model\.pt: pickled weights \(the legacy format\), which "
                              r"torch\.export\.load would unpickle; refused unopened",
}


@pytest.fixture(scope="module")
def small_run(tiny_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return train_mlp(tiny_data, tmp_path_factory.mktemp("runs") / "small", hidden=8)


@pytest.fixture
def digit(tmp_path: Path) -> Path:
    path = tmp_path / "digit.png"
    Image.new("L", (28, 28), 0).save(path)
    return path


def _one_line(text: str) -> str:
    lines = text.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in text, text
    return lines[0]


@pytest.mark.parametrize("payload", list(payloads.PT2_PAYLOADS))
def test_a_pt2_payload_is_refused_naming_the_file_and_never_runs(payload: str, tmp_path: Path, digit: Path) -> None:
    marker = tmp_path / "marker"
    evil = payloads.PT2_PAYLOADS[payload](tmp_path / "evil.pt2", marker)
    for load in (lambda: open_model(evil), lambda: predict(evil, digit), lambda: predict(str(evil), [str(digit)])):
        with pytest.raises(CheckpointError) as refused:
            load()
        assert _one_line(str(refused.value)).startswith(f"ckpt_path: {evil} ")
        assert re.search(PT2_REFUSALS[payload], str(refused.value)), str(refused.value)
    assert not marker.exists()


@pytest.mark.parametrize("payload", ["pickled weight", "pickled constant", "pickled sample inputs",
                                     "opaque object constant", "aten.from_file node", "guard code",
                                     "sympy shape expression", "legacy pickled weights"])
def test_torch_export_load_itself_still_runs_these_payloads(payload: str, tmp_path: Path) -> None:
    """Why the archive is checked before torch reads it. When this fails, torch refuses the payload itself."""
    marker = tmp_path / "marker"
    evil = payloads.PT2_PAYLOADS[payload](tmp_path / "evil.pt2", marker)
    logging.getLogger("torch").disabled = True
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            program = torch.export.load(str(evil))
            program.module()(torch.zeros(2, 1, 28, 28))
    except Exception:  # noqa: BLE001 - the payload ran as the file loaded; what torch did next does not matter
        pass
    finally:
        logging.getLogger("torch").disabled = False
    assert marker.exists()


def test_predict_on_a_pt2_with_a_pickled_weight_is_one_line_exit_2(run_main, tmp_path: Path, digit: Path) -> None:
    marker = tmp_path / "marker"
    evil = payloads.pt2_pickled_weight(tmp_path / "evil.pt2", marker)
    refused = run_main("predict", f"ckpt_path={evil}", f"inputs={digit}", f"output={tmp_path / 'out.csv'}")
    assert refused.returncode == 2
    assert _one_line(refused.stderr).startswith(f"error: ckpt_path: {evil} holds a pickled weight 'offset'")
    assert not marker.exists() and not (tmp_path / "out.csv").exists()


@pytest.mark.e2e
def test_predict_in_a_process_of_its_own_from_another_folder(tmp_path: Path, digit: Path) -> None:
    """The acceptance of issue 38, as a user runs it: another working folder, a real process."""
    marker = tmp_path / "marker"
    payloads.pt2_pickled_weight(tmp_path / "evil.pt2", marker)
    done = subprocess.run([sys.executable, "-m", "modelforge", "predict", "ckpt_path=evil.pt2", "inputs=digit.png"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 2, done.stderr
    assert _one_line(done.stderr).startswith("error: ckpt_path: evil.pt2 holds a pickled weight 'offset'")
    assert not marker.exists()


def test_load_model_refuses_an_exported_file_as_no_checkpoint(tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    evil = payloads.pt2_pickled_weight(tmp_path / "evil.pt2", marker)
    with pytest.raises(CheckpointError, match=rf"^ckpt_path: {evil} is a torch\.export program, not a checkpoint: "
                                              r"an exported model runs with `python -m modelforge predict "
                                              r"ckpt_path=FILE`"):
        modelforge.load_model(evil)
    assert not marker.exists()


def test_torchscript_source_that_writes_a_file_is_refused_unloaded(tmp_path: Path, digit: Path) -> None:
    marker = tmp_path / "marker"
    evil = payloads.torchscript_from_file(tmp_path / "evil.pt", marker)
    with pytest.raises(CheckpointError, match=rf"^ckpt_path: {evil} holds TorchScript source that reaches the file "
                                              r"system \(code/__torch__/.*\.py calls torch\.from_file\): "
                                              r"refused unloaded$"):
        predict(evil, digit)
    assert not marker.exists()
    with warnings.catch_warnings():  # torch itself runs it: the reason for the check
        warnings.simplefilter("ignore")
        torch.jit.load(str(evil))(torch.zeros(1, 1, 28, 28))
    assert marker.exists()


def test_a_torchscript_pickle_that_calls_open_is_refused_by_torch(tmp_path: Path, digit: Path) -> None:
    marker = tmp_path / "marker"
    evil = payloads.torchscript_pickled_data(tmp_path / "evil.pt", marker)
    with pytest.raises(CheckpointError, match=rf"^ckpt_path: {evil} is not a loadable TorchScript file \("):
        predict(evil, digit)
    assert not marker.exists()


def _evil_checkpoint(small_run: Path, path: Path, marker: Path) -> Path:
    checkpoint = torch.load(small_run / "checkpoints" / "last.ckpt", weights_only=True)
    torch.save({**checkpoint, "payload": payloads.OpensMarker(marker)}, path)
    return path


def test_a_checkpoint_payload_is_refused_everywhere_a_checkpoint_is_read(run_main, small_run: Path, tiny_data: Path,
                                                                         tmp_path: Path, digit: Path) -> None:
    marker = tmp_path / "marker"
    evil = _evil_checkpoint(small_run, tmp_path / "evil.ckpt", marker)
    refusal = (f"{evil} is not a loadable checkpoint (weights-only load refused it: Unsupported global: GLOBAL io.open "
               "was not an allowed global by default)")
    for args, key in [(("predict", f"ckpt_path={evil}", f"inputs={digit}", f"output={tmp_path}/p.csv"), "ckpt_path"),
                      (("eval", f"ckpt_path={evil}", *tiny_cli_args(tiny_data), f"hydra.run.dir={tmp_path}/e"),
                       "ckpt_path"),
                      (("train", f"ckpt_path={evil}", *tiny_cli_args(tiny_data), "model=mlp", "model.hidden_sizes=[8]",
                        f"hydra.run.dir={tmp_path}/t"), "ckpt_path"),
                      (("train", f"init.from={evil}", *tiny_cli_args(tiny_data), "model=mlp", "model.hidden_sizes=[8]",
                        f"hydra.run.dir={tmp_path}/i"), "init.from")]:
        refused = run_main(*args)
        assert refused.returncode == 2, (args[0], refused.stderr)
        assert _one_line(refused.stderr).startswith(f"error: {key}: {refusal}"), refused.stderr
    with pytest.raises(CheckpointError, match="weights-only load refused it"):
        modelforge.load_model(evil)
    assert not marker.exists()
    assert not {"p.csv", "i"} & {p.name for p in tmp_path.iterdir()}  # no CSV; no run dir for init.from


def test_a_stored_config_that_names_a_class_is_refused_unused(run_main, small_run: Path, tiny_data: Path,
                                                              tmp_path: Path) -> None:
    """eval passes the stored trainer.precision to Lightning through hydra's instantiate, which builds a _target_."""
    marker = tmp_path / "marker"
    checkpoint = torch.load(small_run / "checkpoints" / "last.ckpt", weights_only=True)
    checkpoint["hyper_parameters"]["config"]["trainer"]["precision"] = {
        "_target_": "builtins.open", "_args_": [str(marker), "w"]}
    evil = tmp_path / "evil.ckpt"
    torch.save(checkpoint, evil)
    refused = run_main("eval", f"ckpt_path={evil}", *tiny_cli_args(tiny_data), f"hydra.run.dir={tmp_path}/e")
    assert refused.returncode == 2
    assert _one_line(refused.stderr) == (f"error: ckpt_path: {evil} has a stored config that names a class to build "
                                         "at trainer.precision ('builtins.open'), where a run's config never does: "
                                         "refused unused")
    with pytest.raises(CheckpointError, match="names a class to build at trainer.precision"):
        modelforge.load_model(evil)
    assert not marker.exists()


def test_a_yaml_tag_that_builds_an_object_is_refused(run_main, tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    folder = tmp_path / "conf" / "experiment"
    folder.mkdir(parents=True)
    (folder / "evil.yaml").write_text(f"# @package _global_\nseed: !!python/object/apply:builtins.open "
                                      f"[{marker}, w]\n")
    refused = run_main("train", "--config-dir", str(tmp_path / "conf"), "experiment=evil",
                       f"hydra.run.dir={tmp_path}/t")
    assert refused.returncode == 2
    assert refused.stderr == (f"error: {folder / 'evil.yaml'}:2:7: invalid YAML: could not determine a constructor "
                              "for the tag 'tag:yaml.org,2002:python/object/apply:builtins.open'\n"
                              "  hint: a config holds plain values; tags that build Python objects are refused\n")
    with pytest.raises(ConfigError, match=r"evil\.yaml:2:7: invalid YAML: could not determine a constructor"):
        load_config(folder / "evil.yaml")
    assert not marker.exists()


def test_a_nested_target_in_a_config_file_is_refused(run_main, tiny_data: Path, tmp_path: Path) -> None:
    """Options go to hydra's instantiate, which builds any mapping with a _target_ in them, recursively."""
    marker = tmp_path / "marker"
    folder = tmp_path / "conf" / "experiment"
    folder.mkdir(parents=True)
    (folder / "evil.yaml").write_text("# @package _global_\noptim:\n  foreach: {_target_: builtins.open, "
                                      f"_args_: [{marker}, w]}}\n")
    refused = run_main("train", "--config-dir", str(tmp_path / "conf"), "experiment=evil", *tiny_cli_args(tiny_data),
                       "model=mlp", f"hydra.run.dir={tmp_path}/t")
    assert refused.returncode == 2
    assert _one_line(refused.stderr) == ("error: optim.foreach._target_: optim Adam takes plain values here, not a "
                                         "class to build ('builtins.open'): hydra's instantiate would build it, "
                                         "unchecked")
    assert not marker.exists() and not (tmp_path / "t").exists()


def test_a_torch_save_checkpoint_named_pt2_is_told_what_it_is(small_run: Path, tmp_path: Path, digit: Path) -> None:
    renamed = tmp_path / "model.pt2"
    renamed.write_bytes((small_run / "checkpoints" / "last.ckpt").read_bytes())
    with pytest.raises(CheckpointError) as refused:
        predict(renamed, digit)
    assert str(refused.value) == (
        f"ckpt_path: {renamed} is a torch.save checkpoint, not a torch.export program (the kind its .pt2 suffix "
        "names): a checkpoint runs as ckpt_path=FILE.ckpt (or its run directory); `python -m modelforge export "
        "ckpt_path=FILE.ckpt` makes an exported model of it")


BOMB = {**payloads.METADATA, "input_shape": [1, 60000, 60000]}


def test_a_pt2_whose_metadata_is_a_memory_bomb_is_refused_before_allocating(run_main, tmp_path: Path,
                                                                           digit: Path) -> None:
    bomb = payloads.clean_pt2(tmp_path / "bomb.pt2", BOMB)
    refused = run_main("predict", f"ckpt_path={bomb}", f"inputs={digit}", f"output={tmp_path}/p.csv")
    assert refused.returncode == 2
    assert _one_line(refused.stderr) == (
        f"error: ckpt_path: {bomb}: its modelforge metadata says input_shape [1, 60000, 60000], 3,600,000,000 "
        "values an image, more than max_pixels=120,000,000: refused before allocating (raise max_pixels if the "
        "model really takes images that large)")


def _onnx_file(path: Path, metadata: dict, external: str | None = None) -> Path:
    import onnx
    from onnx import TensorProto, helper

    weight = helper.make_tensor("w", TensorProto.FLOAT, [1], [1.0])
    if external is not None:  # the weight's bytes in another file, as onnx's external data names them
        weight.ClearField("float_data")
        weight.data_location = TensorProto.EXTERNAL
        weight.external_data.add(key="location", value=external)
    graph = helper.make_graph([helper.make_node("Mul", ["images", "w"], ["logits"])], "g",
                              [helper.make_tensor_value_info("images", TensorProto.FLOAT, [1, 10])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 10])], [weight])
    model = helper.make_model(graph)
    helper.set_model_props(model, {"modelforge": json.dumps(metadata)})
    path.write_bytes(model.SerializeToString())
    assert onnx.load_model_from_string(path.read_bytes()).metadata_props
    return path


@needs_onnx
def test_an_onnx_model_whose_metadata_is_a_memory_bomb_is_refused(tmp_path: Path, digit: Path) -> None:
    bomb = _onnx_file(tmp_path / "bomb.onnx", BOMB)
    with pytest.raises(CheckpointError, match=r"input_shape \[1, 60000, 60000\], 3,600,000,000 values an image, more "
                                              r"than max_pixels=120,000,000: refused before allocating"):
        predict(bomb, digit)


@needs_onnx
def test_an_onnx_model_with_weights_in_another_file_is_refused_unread(tmp_path: Path, digit: Path) -> None:
    (tmp_path / "secret.txt").write_text("not for a model to read")
    evil = _onnx_file(tmp_path / "evil.onnx", payloads.METADATA, external="../secret.txt")
    with pytest.raises(CheckpointError, match=rf"^ckpt_path: {evil} keeps weights in other files \(1 tensors, e\.g\. "
                                              r"'w' in '\.\./secret\.txt'\): modelforge's exports hold their weights "
                                              r"inside; refused unread$"):
        predict(evil, digit)


def test_a_clean_pt2_made_the_same_way_runs(tmp_path: Path, digit: Path) -> None:
    """The payload files above differ from a file that loads only by their payload."""
    rows = predict(payloads.clean_pt2(tmp_path / "clean.pt2"), digit)
    assert len(rows) == 1 and rows[0]["input"] == str(digit)

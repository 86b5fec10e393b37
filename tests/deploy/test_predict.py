"""``predict``: image files through a trained model, preprocessed as training was, as a table and a CSV.

A tiny cnn is trained with the real Trainer on generated IDX files (class k: a bright square in grid cell k);
its test images are written as real PNG/JPEG files with Pillow. Predictions are checked against the loaded
model applied by hand to the same pixels, normalized as the training batches were.
"""

from __future__ import annotations

import csv
import inspect
import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from PIL import Image

from modelforge import load_model
from modelforge.config import conf_dir
from modelforge.data.idx import IMAGES_MAGIC, LABELS_MAGIC
from modelforge.deploy import predict as predict_module
from modelforge.deploy.images import border_mean, fit_to, read_inputs
from modelforge.deploy.predict import csv_text, format_table, predict
from modelforge.deploy.runtime import Runner
from modelforge.errors import CheckpointError, ConfigError, DataError
from modelforge.train import train
from tests.conftest import REAL_MNIST
from tests.helpers.mnist_idx import idx_bytes, pattern_images, write_idx, write_mnist_idx
from tests.helpers.run_config import compose_train

N_TEST = 12


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run directory of a tiny cnn trained 3 epochs on 160 generated images (about 2 s)."""
    data, run_dir = tmp_path_factory.mktemp("tiny_mnist"), tmp_path_factory.mktemp("run")
    write_mnist_idx(data, n_train=160, n_test=64)
    train(compose_train(data, "model=cnn", "enc_sizes=[8,16]", "dec_sizes=[32]", "trainer.max_epochs=3",
                        "optim.lr=3e-3"), run_dir=run_dir)
    return run_dir


@pytest.fixture(scope="module")
def ckpt(trained: Path) -> Path:
    return trained / "checkpoints" / "last.ckpt"


@pytest.fixture(scope="module")
def digits(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, torch.Tensor, torch.Tensor]:
    """A folder of N_TEST PNGs of the pattern images (not the training ones), their pixels and labels."""
    folder = tmp_path_factory.mktemp("digits")
    labels = torch.arange(N_TEST) % 10
    pixels = pattern_images(labels, seed=5)
    for i, image in enumerate(pixels):
        Image.fromarray(image.numpy()).save(folder / f"{i:02d}.png")
    return folder, pixels, labels


def by_hand(model: torch.nn.Module, pixels: torch.Tensor) -> torch.Tensor:
    """Softmax of ``model`` on uint8 [N, H, W], normalized as MnistBatches does it."""
    norm = model.modelforge_meta["normalize"]
    x = pixels.unsqueeze(1).float().div_(255.0).sub_(norm["mean"][0]).div_(norm["std"][0])
    with torch.no_grad():
        return torch.softmax(model(x), dim=1)


def assert_rows_match(rows: list[dict], probs: torch.Tensor, top_k: int = 3, atol: float = 1e-6) -> None:
    values, indices = probs.topk(top_k, dim=1)
    for row, p, i in zip(rows, values.tolist(), indices.tolist(), strict=True):
        assert [row[f"class_{r + 1}"] for r in range(top_k)] == [str(k) for k in i]
        assert [row[f"prob_{r + 1}"] for r in range(top_k)] == pytest.approx(p, abs=atol)


def test_pngs_give_the_models_own_probabilities(ckpt: Path, digits) -> None:
    folder, pixels, labels = digits
    rows = predict(ckpt, folder)
    model = load_model(ckpt)
    assert [row["input"] for row in rows] == [str(folder / f"{i:02d}.png") for i in range(N_TEST)]
    assert_rows_match(rows, by_hand(model, pixels))
    assert not any(row["inverted"] for row in rows)  # dark borders: taken as they are
    assert sum(row["class_1"] == str(k) for row, k in zip(rows, labels.tolist())) >= N_TEST - 1  # it learned


def test_a_run_directory_a_loaded_module_and_a_tensor_predict_the_same(trained: Path, ckpt: Path, digits) -> None:
    folder, pixels, _ = digits
    expected = predict(ckpt, folder, top_k=2)
    from_run = predict(trained, folder, top_k=2)
    from_module = predict(load_model(ckpt), pixels, top_k=2)
    assert [r["class_1"] for r in from_run] == [r["class_1"] for r in expected]
    assert [r["prob_1"] for r in from_module] == pytest.approx([r["prob_1"] for r in expected], abs=1e-6)
    assert from_module[0]["input"] == "tensor[0]" and list(from_module[0]) == [
        "input", "inverted", "class_1", "prob_1", "class_2", "prob_2"]


def test_black_on_white_is_inverted_by_auto_and_by_true(ckpt: Path, digits, tmp_path: Path) -> None:
    _, pixels, _ = digits
    for i, image in enumerate(pixels[:4]):
        Image.fromarray(255 - image.numpy()).save(tmp_path / f"paper_{i}.png")
    expected = by_hand(load_model(ckpt), pixels[:4])
    auto = predict(ckpt, tmp_path, invert="auto")
    assert all(row["inverted"] for row in auto)
    assert_rows_match(auto, expected)
    assert_rows_match(predict(ckpt, tmp_path, invert=True), expected)
    as_is = predict(ckpt, tmp_path, invert=False)
    assert not any(row["inverted"] for row in as_is)
    assert [r["prob_1"] for r in as_is] != pytest.approx([r["prob_1"] for r in auto], abs=1e-3)


def test_a_larger_image_a_jpeg_and_an_rgba_drawing_predict_as_the_original(ckpt: Path, digits, tmp_path: Path) -> None:
    _, pixels, _ = digits
    image = Image.fromarray(pixels[3].numpy())
    image.resize((100, 100), Image.Resampling.BICUBIC).save(tmp_path / "big.png")
    image.convert("RGB").save(tmp_path / "photo.jpg", quality=95)
    ink = Image.fromarray(pixels[3].numpy())  # dark ink on a transparent ground, as a drawing app exports it
    Image.merge("RGBA", [Image.new("L", ink.size, 0)] * 3 + [ink]).save(tmp_path / "drawn.png")
    expected = by_hand(load_model(ckpt), pixels[3:4])[0]
    rows = {Path(r["input"]).name: r for r in predict(ckpt, tmp_path, top_k=1)}
    assert rows["drawn.png"]["inverted"] and not rows["big.png"]["inverted"]
    for name, row in rows.items():
        assert row["class_1"] == str(int(expected.argmax())), name
        assert row["prob_1"] == pytest.approx(float(expected.max()), abs=0.05), name


def test_folder_glob_list_and_idx_file(ckpt: Path, digits, tmp_path: Path) -> None:
    folder, pixels, _ = digits
    assert len(read_inputs(folder).images) == N_TEST
    (tmp_path / "mixed").mkdir()
    (tmp_path / "mixed" / "notes.txt").write_text("a folder's other files are left out")
    Image.fromarray(pixels[0].numpy()).save(tmp_path / "mixed" / "a.PNG")
    assert [i.name for i in read_inputs(tmp_path / "mixed").images] == [str(tmp_path / "mixed" / "a.PNG")]
    globbed = predict(ckpt, str(folder / "0*.png"), top_k=1)
    assert [Path(r["input"]).name for r in globbed] == [f"0{i}.png" for i in range(10)]
    listed = predict(ckpt, [folder / "03.png", folder / "01.png", folder / "03.png"], top_k=1)
    assert [Path(r["input"]).name for r in listed] == ["03.png", "01.png"]  # in the order given, once each
    idx = write_idx(tmp_path / "mine-images-idx3-ubyte.gz", idx_bytes(pixels, IMAGES_MAGIC))
    rows = predict(ckpt, idx)
    assert [r["input"] for r in rows] == [f"{idx}[{i}]" for i in range(N_TEST)]
    assert_rows_match(rows, by_hand(load_model(ckpt), pixels))


def test_the_cli_prints_a_table_and_writes_the_csv(run_main, ckpt: Path, digits, tmp_path: Path) -> None:
    folder, _, _ = digits
    out = tmp_path / "preds.csv"
    result = run_main("predict", f"ckpt_path={ckpt}", f"inputs={folder}", f"output={out}", "top_k=2")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("input"))
    assert lines[header].split() == ["input", "inverted", "top-1", "top-2"]
    rows = predict(ckpt, folder, top_k=2)
    first = lines[header + 1].split()
    assert first[:3] == [rows[0]["input"], "no", rows[0]["class_1"]]
    assert first[3] == f"{100 * rows[0]['prob_1']:.1f}%"
    assert f"{N_TEST} images classified by cnn from {ckpt}" in result.stdout
    assert f"predictions written to {out}" in result.stdout
    written = list(csv.DictReader(out.read_text().splitlines(keepends=True)))
    assert list(written[0]) == ["input", "inverted", "class_1", "prob_1", "class_2", "prob_2"]
    assert [r["class_1"] for r in written] == [r["class_1"] for r in rows]
    assert [float(r["prob_1"]) for r in written] == pytest.approx([r["prob_1"] for r in rows], abs=1e-6)


def test_without_output_the_csv_goes_under_outputs_predict_and_nothing_else_is_written(
        run_main, ckpt: Path, digits, tmp_path: Path) -> None:
    folder, _, _ = digits
    result = run_main("predict", f"ckpt_path={ckpt}", f"inputs={folder}", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert len(written) == 1 and written[0].name == "predictions.csv", written
    assert written[0].relative_to(tmp_path).parts[:2] == ("outputs", "predict")
    assert f"predictions written to {written[0]}" in result.stdout
    into_folder = run_main("predict", f"ckpt_path={ckpt}", f"inputs={folder}", f"output={tmp_path / 'here'}/")
    assert into_folder.returncode == 0 and (tmp_path / "here" / "predictions.csv").is_file()


def _bad_png(folder: Path) -> str:
    (folder / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\n not really")
    return str(folder / "broken.png")


def _cut_png(folder: Path) -> str:
    noise = np.random.default_rng(0).integers(0, 256, (64, 64), dtype=np.uint8)  # incompressible: cut in the pixels
    Image.fromarray(noise).save(folder / "cut.png")
    data = (folder / "cut.png").read_bytes()
    (folder / "cut.png").write_bytes(data[: len(data) // 2])
    return str(folder / "cut.png")


def _labels_as_images(folder: Path) -> str:
    return str(write_idx(folder / "t10k-labels-idx1-ubyte", idx_bytes(torch.arange(5), LABELS_MAGIC)))


def _short_idx(folder: Path) -> str:
    return str(write_idx(folder / "few-images-idx3-ubyte", idx_bytes(torch.zeros(3, 28, 28), IMAGES_MAGIC)[:-10]))


def _empty_folder(folder: Path) -> str:
    (folder / "empty").mkdir()
    return str(folder / "empty")


BAD_INPUTS = {  # inputs: (its path in the folder, the message's pattern)
    "no file": (lambda f: str(f / "nope.png"), r"inputs: no file or folder '.*nope\.png' \(looked for /"),
    "glob matches nothing": (lambda f: str(f / "*.jpeg"), r"inputs: no images match '.*\*\.jpeg'"),
    "empty folder": (_empty_folder, r"inputs: no images in folder .*empty \(looked for \.png, \.jpg"),
    "not an image": (_bad_png, r"inputs: .*broken\.png is not an image Pillow can read"),
    "truncated image": (_cut_png, r"inputs: .*cut\.png cannot be read as an image"),
    "labels, not images": (_labels_as_images, r"wrong magic number 2049 .*this is not an MNIST images file"),
    "truncated IDX": (_short_idx, r"inputs: .*few-images-idx3-ubyte: truncated"),
}


@pytest.mark.parametrize("case", BAD_INPUTS)
def test_a_bad_input_is_one_error_before_the_model_loads(run_main, ckpt: Path, tmp_path: Path, case: str) -> None:
    make, pattern = BAD_INPUTS[case]
    result = run_main("predict", f"ckpt_path={ckpt}", f"inputs={make(tmp_path)}", f"output={tmp_path / 'p.csv'}")
    assert result.returncode == 2
    assert result.stderr.startswith("error: ") and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) <= 2, result.stderr
    assert re.search(pattern, result.stderr), result.stderr
    assert "loaded cnn" not in result.stdout + result.stderr  # refused before any work
    assert not (tmp_path / "p.csv").exists()


BAD_OPTIONS = {
    "invert=maybe": r"error: invert: got 'maybe'\n  allowed: auto .*false .*true",
    "top_k=0": r"error: top_k: got 0\n  allowed: an integer >= 1",
    "topk=2": r"error: topk: no key 'topk' at the top level of the config\n  did you mean 'top_k'\?",
    "ckpt_path=null": r"error: ckpt_path: missing: which model to run",
    "inputs=null": r"error: inputs: missing: which images to classify",
    "ckpt_path=/nowhere/run": r"error: ckpt_path: no checkpoint, run directory or exported model at /nowhere/run",
}


@pytest.mark.parametrize("option", BAD_OPTIONS)
def test_a_bad_option_is_one_error(run_main, ckpt: Path, digits, option: str) -> None:
    folder, _, _ = digits
    result = run_main("predict", f"ckpt_path={ckpt}", f"inputs={folder}", option)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert re.search(BAD_OPTIONS[option], result.stderr), result.stderr


def test_an_output_under_a_file_is_refused_before_work(run_main, ckpt: Path, digits, tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    result = run_main("predict", f"ckpt_path={ckpt}", f"inputs={digits[0]}", f"output={tmp_path / 'file' / 'p.csv'}")
    assert result.returncode == 2
    assert result.stderr.startswith(f"error: output: cannot write {tmp_path / 'file' / 'p.csv'}: ")


def test_a_foreign_file_as_the_model_is_the_loaders_error(run_main, digits, tmp_path: Path) -> None:
    torch.save({"weights": torch.zeros(2)}, tmp_path / "other.ckpt")
    result = run_main("predict", f"ckpt_path={tmp_path / 'other.ckpt'}", f"inputs={digits[0]}")
    assert result.returncode == 2
    assert "is not a modelforge checkpoint" in result.stderr and "Traceback" not in result.stderr
    with pytest.raises(CheckpointError, match="not a modelforge checkpoint"):
        predict(tmp_path / "other.ckpt", digits[0])


def test_a_module_without_metadata_is_refused_with_a_hint(digits) -> None:
    from modelforge import build_model

    with pytest.raises(ConfigError, match=r"carries no modelforge_meta.*\n  hint: load it with modelforge.load_model"):
        predict(build_model({"name": "mlp", "hidden_sizes": [8]}), digits[1])
    with pytest.raises(DataError, match=r"uint8 \[H, W\] or \[N, H, W\] \(gray\), or \[N, C, H, W\] .*, got torch.float32"):
        predict(build_model({"name": "mlp"}), digits[1].float())


@pytest.mark.parametrize("format", ["pt2", "onnx", "torchscript"])
def test_an_exported_file_predicts_what_the_checkpoint_predicts(run_main, ckpt: Path, digits, tmp_path: Path,
                                                               format: str) -> None:
    if format == "onnx":
        pytest.importorskip("onnxruntime")
    from modelforge.deploy.export import export

    folder, _, _ = digits
    exported = export(ckpt, format, output=tmp_path, check=False)
    expected = predict(ckpt, folder)
    rows = predict(exported, folder)
    assert [r["class_1"] for r in rows] == [r["class_1"] for r in expected]
    assert [r["prob_1"] for r in rows] == pytest.approx([r["prob_1"] for r in expected], abs=1e-5)
    result = run_main("predict", f"ckpt_path={exported}", f"inputs={folder}", f"output={tmp_path / 'p.csv'}")
    assert result.returncode == 0, result.stderr
    runs_on = {"pt2": "torch.export program", "onnx": "onnxruntime", "torchscript": "TorchScript"}[format]
    assert f"{N_TEST} images classified by cnn from {exported} ({runs_on}) in " in result.stdout


def test_an_export_with_a_fixed_batch_size_runs_every_image(ckpt: Path, digits, tmp_path: Path) -> None:
    from modelforge.deploy.export import export

    exported = export(ckpt, "pt2", output=tmp_path / "b5.pt2", check=False, dynamic_batch=False, batch_size=5)
    rows = predict(exported, digits[0], top_k=1)  # 12 images: batches of 5, 5 and 2 padded to 5
    assert [r["class_1"] for r in rows] == [r["class_1"] for r in predict(ckpt, digits[0], top_k=1)]


def test_an_exported_file_without_metadata_is_refused(ckpt: Path, digits, tmp_path: Path) -> None:
    model = load_model(ckpt)
    program = torch.export.export(model, (torch.zeros(2, 1, 28, 28),))
    torch.export.save(program, tmp_path / "bare.pt2")
    with pytest.raises(CheckpointError, match=r"bare\.pt2 carries no modelforge metadata"):
        predict(tmp_path / "bare.pt2", digits[0])


def test_a_program_with_a_fixed_batch_size_gets_padded_batches() -> None:
    seen = []

    def forward(batch: torch.Tensor) -> torch.Tensor:
        seen.append(len(batch))
        return batch.flatten(1)[:, :3]

    batch = torch.arange(10 * 4, dtype=torch.float32).view(10, 1, 2, 2)
    logits = Runner(forward, {}, "test", batch_size=4)(batch)
    assert seen == [4, 4, 4] and torch.equal(logits, batch.flatten(1)[:, :3])


def test_preprocessing_helpers() -> None:
    ring = torch.zeros(28, 28, dtype=torch.uint8)
    ring[0, :] = 255
    assert float(border_mean(ring)) == pytest.approx(255 * 28 / (28 * 28 - 26 * 26))
    wide = torch.zeros(10, 40, dtype=torch.uint8)
    wide[2:8, 15:25] = 200
    fitted = fit_to(wide, (28, 28))  # padded to 40x40 with its (dark) border, not stretched to 28x28
    assert fitted.shape == (28, 28) and int(fitted[:9].max()) == 0 and int(fitted[13:16, 12:17].min()) > 150
    assert int(fit_to(wide + 100, (28, 28))[:9].min()) == 100  # padded with a light border on a light image


def test_the_table_shortens_long_runs_and_the_csv_keeps_every_row() -> None:
    rows = [{"input": f"x[{i}]", "inverted": False, "class_1": "7", "prob_1": 0.5} for i in range(250)]
    table = format_table(rows).splitlines()
    assert len(table) == 1 + 100 + 1 and table[51] == "... 150 more rows in the CSV"
    assert table[-1].split() == ["x[249]", "no", "7", "50.0%"]
    assert len(csv_text(rows).splitlines()) == 251


def test_predict_yaml_holds_the_signatures_defaults() -> None:
    shipped = yaml.safe_load((conf_dir() / "predict.yaml").read_text())
    defaults = {k: p.default for k, p in inspect.signature(predict_module.predict).parameters.items()
                if p.default is not inspect.Parameter.empty}
    assert {k: shipped[k] for k in defaults} == defaults
    assert shipped["hydra"]["output_subdir"] is None and shipped["hydra"]["run"]["dir"] == "."


@pytest.mark.slow
@pytest.mark.skipif(not (REAL_MNIST / "t10k-images-idx3-ubyte.gz").is_file(),
                    reason=f"real MNIST not found at {REAL_MNIST} (set MODELFORGE_REAL_MNIST)")
def test_real_mnist_digits_and_drawings_from_the_checkpoint_and_its_exports(cli, tmp_path: Path) -> None:
    """The acceptance run, from outside the checkout: ten PNGs cut from the MNIST test set, their black-on-white copies at 100x100 as
    JPEGs, the test IDX file; the checkpoint, its .pt2 and its .onnx agree on every image."""
    from modelforge.data.idx import parse_idx, read_idx_bytes

    env = {"MODELFORGE_DATA": str(REAL_MNIST)}
    run = tmp_path / "run"
    trained = cli("train", "experiment=fast", "trainer.limit_train_batches=300", f"hydra.run.dir={run}",
                  "trainer.enable_progress_bar=false", env=env, cwd=tmp_path, timeout=900)
    assert trained.returncode == 0, trained.stderr[-3000:]
    test_images = REAL_MNIST / "t10k-images-idx3-ubyte.gz"
    pixels = parse_idx(read_idx_bytes(test_images), magic=IMAGES_MAGIC)
    labels = parse_idx(read_idx_bytes(REAL_MNIST / "t10k-labels-idx1-ubyte.gz"), magic=LABELS_MAGIC).long()
    (tmp_path / "digits").mkdir()
    (tmp_path / "paper").mkdir()
    for i in range(10):
        Image.fromarray(pixels[i].numpy()).save(tmp_path / "digits" / f"{i}.png")
        big = Image.fromarray(255 - pixels[i].numpy()).resize((100, 100), Image.Resampling.BICUBIC)
        big.convert("RGB").save(tmp_path / "paper" / f"{i}.jpg", quality=90)
    ckpt = run / "checkpoints" / "last.ckpt"
    result = cli("predict", f"ckpt_path={ckpt}", f"inputs={tmp_path / 'digits'}", f"output={tmp_path / 'p.csv'}",
                 env=env, cwd=tmp_path, timeout=300)
    assert result.returncode == 0, result.stderr
    rows = list(csv.DictReader((tmp_path / "p.csv").read_text().splitlines(keepends=True)))
    assert sum(r["class_1"] == str(int(k)) for r, k in zip(rows, labels[:10])) >= 9
    printed = [line.split()[2] for line in result.stdout.splitlines() if line.startswith(str(tmp_path / "digits"))]
    assert printed == [r["class_1"] for r in rows]
    drawn = predict(ckpt, str(tmp_path / "paper" / "*.jpg"), top_k=1)
    assert all(r["inverted"] for r in drawn)
    assert sum(r["class_1"] == str(int(k)) for r, k in zip(drawn, labels[:10])) >= 9
    idx_rows = predict(ckpt, test_images, top_k=1)
    accuracy = sum(r["class_1"] == str(int(k)) for r, k in zip(idx_rows, labels)) / len(labels)
    reported = json.loads((run / "metrics.json").read_text())["test/acc"]
    assert accuracy == pytest.approx(reported, abs=1e-4)  # the test set through predict is the run's own test
    from modelforge.deploy.export import export

    expected = predict(ckpt, [tmp_path / "digits", tmp_path / "paper"])
    (tmp_path / "exports").mkdir()
    for format in ("pt2", "onnx"):
        exported = export(ckpt, format, output=tmp_path / "exports", data_dir=REAL_MNIST)
        got = predict(exported, [tmp_path / "digits", tmp_path / "paper"])
        assert [r["class_1"] for r in got] == [r["class_1"] for r in expected], format
        assert [r["prob_1"] for r in got] == pytest.approx([r["prob_1"] for r in expected], abs=1e-5), format

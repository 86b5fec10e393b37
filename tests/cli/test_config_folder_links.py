"""A user's config folder as Hydra reads it: linked files and folders followed, FIFOs and devices never read, files
the run does not select left alone, and a shipped name refused only where the run selects it (all at once)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from modelforge import ConfigError, create_model
from tests.conftest import REPO, run_cli

CNN_PARAMS = "421,834"  # the shipped cnn at 1x28x28
MLP_3_PARAMS = 784 * 3 + 3 + 3 * 10 + 10  # an mlp of hidden_sizes [3]


def refused(result) -> str:
    """The one error of a refused command (exit 2, no traceback)."""
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    assert result.stderr.startswith("error: ")
    return result.stderr.splitlines()[0]


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """A config folder with its own blocks/swin.yaml and model/swin_t.yaml (shipped names), a model/ folder that
    is a link, a file linked from outside, a broken CI file, a loop of links, a FIFO and a /dev/zero link."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "shared.yaml").write_text("name: mlp\nhidden_sizes: [3]\n")
    (outside / "mlp.yaml").write_text("name: cnn\nenc_sizes: [8]\n")
    (outside / "swin_t.yaml").write_text((REPO / "conf" / "model" / "swin_t.yaml").read_text())
    (outside / "mine.yml").write_text("name: mlp\n")
    cfg = tmp_path / "cfg"
    (cfg / "blocks").mkdir(parents=True)
    (cfg / "blocks" / "swin.yaml").write_text((REPO / "conf" / "blocks" / "swin.yaml").read_text())
    (cfg / "model").symlink_to(outside, target_is_directory=True)
    (cfg / "ci").mkdir()
    (cfg / "ci" / "workflow.yaml").write_text("on: [push\njobs: {")  # not YAML, and no config of this run
    (cfg / "ci" / "loop").symlink_to("..", target_is_directory=True)
    (cfg / "ci" / "zero.yaml").symlink_to("/dev/zero")
    os.mkfifo(cfg / "ci" / "fifo.yaml")
    return cfg


def test_a_run_reads_the_users_files_it_selects_and_ignores_the_others(folder: Path) -> None:
    shared = run_cli("summary", "--config-dir", str(folder), "model=shared")  # model/ links out of the folder
    assert shared.returncode == 0, shared.stderr
    assert f"Total params: {MLP_3_PARAMS:,}" in shared.stdout
    cnn = run_cli("summary", "--config-dir", str(folder), "model=cnn")  # swin.yaml, CI file, FIFO: not read
    assert cnn.returncode == 0, cnn.stderr
    assert f"Total params: {CNN_PARAMS}" in cnn.stdout


def test_a_shipped_name_is_refused_where_the_run_selects_it_naming_every_file(folder: Path) -> None:
    mlp = refused(run_cli("summary", "--config-dir", str(folder), "model=mlp"))  # through the linked model/
    assert mlp == (f"error: {folder / 'model' / 'mlp.yaml'}: is never read: the shipped "
                   f"{REPO / 'conf' / 'model' / 'mlp.yaml'} has its name, and Hydra reads the shipped configs first "
                   "(model=mlp is the shipped one)")
    swin = refused(run_cli("summary", "--config-dir", str(folder), "model=swin_t"))
    assert swin.startswith(f"error: {folder / 'blocks' / 'swin.yaml'}, {folder / 'model' / 'swin_t.yaml'}: are "
                           "never read")
    assert "(blocks=swin, model=swin_t are the shipped ones)" in swin
    swept = refused(run_cli("summary", "--config-dir", str(folder), "-m", "model=cnn,mlp"))
    assert swept.startswith(f"error: {folder / 'model' / 'mlp.yaml'}: is never read")


def test_files_hydra_cannot_read_are_named_when_selected(folder: Path) -> None:
    for option, file in (("fifo", "fifo.yaml"), ("zero", "zero.yaml")):
        line = refused(run_cli("summary", "--config-dir", str(folder), f"+ci={option}"))
        assert line == f"error: {folder / 'ci' / file}: is not a regular file (a FIFO, a device, a folder or a " \
                       "broken link): Hydra reads config files only"
    line = refused(run_cli("summary", "--config-dir", str(folder), "model=mine"))
    assert line == f"error: {folder / 'model' / 'mine.yml'}: Hydra reads config files named .yaml only, not .yml"
    broken = refused(run_cli("summary", "--config-dir", str(folder), "+ci=workflow"))  # selected: now it is read
    assert broken.startswith(f"error: {folder / 'ci' / 'workflow.yaml'}:2:")


def test_two_config_dirs_are_refused(folder: Path, tmp_path: Path) -> None:
    line = refused(run_cli("summary", "--config-dir", str(folder), f"--config-dir={tmp_path}", "model=shared"))
    assert line == ("error: --config-dir: given 2 times: Hydra reads one --config-dir (the last) and would drop the "
                    "others without a word")


def test_create_model_judges_a_folder_by_the_model_it_composes(folder: Path) -> None:
    for fifo_or_device in ("fifo.yaml", "zero.yaml"):  # create_model's composition cache would read them
        (folder / "ci" / fifo_or_device).unlink()
    assert sum(p.numel() for p in create_model("shared", config_dir=folder).parameters()) == MLP_3_PARAMS
    assert sum(p.numel() for p in create_model("cnn", config_dir=folder).parameters()) == int(CNN_PARAMS.replace(",", ""))
    with pytest.raises(ConfigError, match=r"blocks/swin.yaml, .*model/swin_t.yaml: are never read"):
        create_model("swin_t", config_dir=folder)
    with pytest.raises(ConfigError, match=r"mine.yml: Hydra reads config files named .yaml only"):
        create_model("mine", config_dir=folder)

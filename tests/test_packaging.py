"""The wheel must carry every subpackage and every folder of conf/ (mapped to modelforge/conf)."""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import tomllib

REPO = Path(__file__).resolve().parents[1]


def test_every_subpackage_is_listed_for_the_wheel() -> None:
    listed = set(tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {".".join(p.parent.relative_to(REPO).parts) for top in ("modelforge", "hydra_plugins")
             for p in (REPO / top).rglob("__init__.py")}
    conf = {".".join(("modelforge", *d.relative_to(REPO).parts)) for d in [REPO / "conf", *(REPO / "conf").rglob("*")]
            if d.is_dir()}
    assert found | conf == listed


def test_installed_layout_finds_conf(tmp_path: Path, monkeypatch) -> None:
    # In a wheel, conf/ sits inside the package; conf_dir() must prefer it there.
    import modelforge.conf_folder as paths

    (tmp_path / "modelforge" / "conf").mkdir(parents=True)
    (tmp_path / "modelforge" / "conf" / "train.yaml").write_text("{}")
    monkeypatch.setattr(paths, "PACKAGE_DIR", tmp_path / "modelforge")
    assert paths.conf_dir() == tmp_path / "modelforge" / "conf"


# --- the small install: `pip install modelforge` gives the builders, `modelforge[train]` the training stack ---

TRAINING_STACK = {"pytorch-lightning", "torchmetrics", "matplotlib", "pillow"}


def _project() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text())["project"]


def _name(requirement: str) -> str:
    return re.split(r"[\s<>=!~;\[]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def _closure(names: set[str]) -> set[str]:
    """The installed distributions ``names`` need, theirs included (extras and markers not taken)."""
    seen: set[str] = set()
    todo = list(names)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        try:
            requires = importlib.metadata.requires(name) or []
        except importlib.metadata.PackageNotFoundError:
            continue
        todo += [_name(r) for r in requires if ";" not in r]
    return seen


def test_the_training_stack_is_an_extra_not_a_dependency() -> None:
    base = {_name(r) for r in _project()["dependencies"]}
    extras = _project()["optional-dependencies"]
    assert {"torch", "hydra-core", "omegaconf"} <= base and not base & TRAINING_STACK
    assert TRAINING_STACK <= {_name(r) for r in extras["train"]}
    # what trains, and the dev and docs installs, bring the training stack with them
    for extra in ("sweep", "slurm", "tensorboard", "export", "dev", "docs"):
        assert any(r.startswith("modelforge[") and "train" in r for r in extras[extra]), extra


BUILDERS = """
import modelforge
from modelforge.weights import save_safetensors
from modelforge.cli.commands import list_names
model = modelforge.create_model("resnet18", ["n_classes=null"])
save_safetensors(modelforge.build_model({"name": "cnn"}), "cnn.safetensors", {"model": {"name": "cnn"}, "data": {}})
modelforge.load_model("cnn.safetensors")
modelforge.format_summary(model, modelforge.summarize(model, model.input_shape), model.input_shape)
list_names([])
"""


@pytest.mark.e2e
def test_the_builders_need_only_the_base_dependencies(tmp_path: Path) -> None:
    """import modelforge, create_model, save_safetensors, load_model, summary and list in an interpreter where every
    installed package outside the base dependencies (and what they need) is blocked, as in `pip install modelforge`:
    what those packages import only when present (torch's numpy, omegaconf's attrs) is left out, as there."""
    allowed = _closure({_name(r) for r in _project()["dependencies"]}) | {"modelforge"}
    owners = importlib.metadata.packages_distributions()
    blocked = sorted(module for module, dists in owners.items()
                     if module.isidentifier() and not {_name(d) for d in dists} & allowed)
    assert {"pytorch_lightning", "torchmetrics", "matplotlib", "PIL", "optuna"} <= set(blocked)
    block = f"import sys; sys.modules.update(dict.fromkeys({blocked!r}))\n"
    out = subprocess.run([sys.executable, "-c", block + BUILDERS], capture_output=True, text=True, timeout=300,
                         cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert out.returncode == 0, out.stderr[-3000:]
    assert "loaded cnn from cnn.safetensors" in out.stderr


# The training stack blocked (None in sys.modules: import raises ModuleNotFoundError), as without the extra.
WITHOUT_TRAIN_EXTRA = """
import runpy, sys
sys.modules.update(dict.fromkeys(["pytorch_lightning", "lightning", "torchmetrics", "matplotlib", "PIL"]))
sys.argv = ["modelforge", *sys.argv[1:]]
runpy.run_module("modelforge", run_name="__main__")
"""


@pytest.mark.e2e
@pytest.mark.parametrize("command", ["train", "eval", "export", "predict"])
def test_a_training_command_without_the_extra_names_it_in_one_line(command: str, tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, "-c", WITHOUT_TRAIN_EXTRA, command, "trainer.max_epochs=1"],
                         capture_output=True, text=True, timeout=300, cwd=tmp_path,
                         env={**os.environ, "PYTHONPATH": str(REPO)})
    assert out.returncode == 2
    assert out.stderr.splitlines() == [
        f"error: `{command}` needs the training extra, which this install lacks (no pytorch_lightning, torchmetrics, "
        "matplotlib, PIL): pip install 'modelforge[train]' (from a checkout: pip install '.[train]')"]
    assert not (tmp_path / "outputs").exists()


@pytest.mark.e2e
def test_summary_runs_without_the_extra(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, "-c", WITHOUT_TRAIN_EXTRA, "summary", "model=cnn"], capture_output=True,
                         text=True, timeout=300, cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert out.returncode == 0, out.stderr[-3000:]
    assert "Total params: 421,834" in out.stdout


@pytest.mark.slow
def test_the_small_install_in_a_fresh_environment(tmp_path: Path) -> None:
    """The issue's acceptance: a new venv with torch, `pip install .` (no extras), then create_model works and
    `train` names the extra."""
    env_dir = tmp_path / "small"
    subprocess.run([sys.executable, "-m", "venv", str(env_dir)], check=True)
    python = str(env_dir / "bin" / "python")
    torch_version = importlib.metadata.version("torch").split("+")[0]
    for args in ([f"torch=={torch_version}"], [str(REPO)]):  # this machine's pip finds torch's CPU wheel locally
        done = subprocess.run([python, "-m", "pip", "install", "--quiet", *args], capture_output=True, text=True,
                              timeout=1800, cwd=tmp_path)
        assert done.returncode == 0, done.stderr[-3000:]
    clean = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    built = subprocess.run([python, "-c", "import modelforge; print(modelforge.create_model('resnet18', "
                            "['n_classes=null']))"], capture_output=True, text=True, cwd=tmp_path, env=clean)
    assert built.returncode == 0 and "GraphModel(" in built.stdout, built.stderr[-3000:]
    train = subprocess.run([python, "-m", "modelforge", "train"], capture_output=True, text=True, cwd=tmp_path,
                           env=clean)
    assert train.returncode == 2 and len(train.stderr.splitlines()) == 1, train.stderr[-3000:]
    assert "pip install 'modelforge[train]'" in train.stderr

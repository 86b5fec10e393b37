"""The Hydra sweeper plugin: found by Hydra, cheap to import (Hydra imports it at every start of any Hydra app),
and registered by modelforge's CLI where Hydra's plugin scan cannot see it."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hydra.core.config_store import ConfigStore

from modelforge.sweep.callback import register_optuna_sweeper

REPO = Path(__file__).resolve().parents[2]
PLUGIN = "hydra_plugins.modelforge_optuna_sweeper"


def test_hydra_scan_finds_the_sweeper_and_its_config() -> None:
    from hydra.core.plugins import Plugins
    from hydra.plugins.sweeper import Sweeper

    names = [f"{p.__module__}.{p.__name__}" for p in Plugins.instance().discover(Sweeper)]
    assert f"{PLUGIN}.sweeper.OptunaSweeper" in names
    assert "modelforge_optuna.yaml" in ConfigStore.instance().list("hydra/sweeper")


@pytest.mark.e2e
def test_the_plugin_imports_neither_optuna_nor_torch() -> None:
    code = (f"import sys, {PLUGIN}.config, {PLUGIN}.sweeper, json; "
            "print(json.dumps(sorted(m for m in ('optuna', 'torch', 'modelforge', 'sqlalchemy') if m in sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == []


def test_registering_stores_the_sweeper_config() -> None:
    register_optuna_sweeper()
    assert "modelforge_optuna.yaml" in ConfigStore.instance().list("hydra/sweeper")


def test_registering_adds_the_sweeper_class_that_hydras_scan_missed() -> None:
    """In an editable install Hydra's scan finds no OptunaSweeper, and a search would fail with `Unknown plugin
    class`: registering adds it (taken out here, as the scan of an editable install leaves it)."""
    from hydra.core.plugins import Plugins
    from hydra.plugins.sweeper import Sweeper

    plugins, name = Plugins.instance(), f"{PLUGIN}.sweeper.OptunaSweeper"
    sweeper = plugins.class_name_to_class.pop(name)
    plugins.plugin_type_to_subclass_list[Sweeper].remove(sweeper)
    try:
        register_optuna_sweeper()
        assert plugins.class_name_to_class[name] is sweeper
        assert sweeper in plugins.discover(Sweeper)
    finally:
        plugins._register(sweeper)


@pytest.mark.slow
@pytest.mark.e2e
def test_an_editable_install_hides_the_plugin_from_hydras_scan(tmp_path: Path) -> None:
    # The reason for register_optuna_sweeper (Hydra issue #2359). When this fails, pkgutil sees the
    # plugin in a PEP 660 editable install: the workaround can go.
    source = tmp_path / "src"
    source.mkdir()
    for name in ("pyproject.toml", "README.md", "modelforge", "conf", "hydra_plugins"):
        copy = shutil.copytree if (REPO / name).is_dir() else shutil.copy
        copy(REPO / name, source / name, **({"ignore": shutil.ignore_patterns("__pycache__")}
                                           if (REPO / name).is_dir() else {}))
    prefix = tmp_path / "prefix"
    # --ignore-installed: into the prefix only; pip would otherwise first uninstall this environment's modelforge.
    built = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                            "--ignore-installed", "--prefix", str(prefix), "-e", str(source)],
                           capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr[-2000:]
    (site,) = prefix.glob("lib/python*/site-packages")
    # -S: this environment's own modelforge (installed or editable) stays out; only the prefix's install is seen.
    probe = ("import site, sys, pkgutil, importlib.util, json; sys.path[:] = [p for p in sys.path if p]; "
             f"site.addsitedir({str(site)!r}); import hydra_plugins; "
             f"walked = [m.name for m in pkgutil.walk_packages(hydra_plugins.__path__, 'hydra_plugins.')]; "
             f"print(json.dumps([walked, importlib.util.find_spec('{PLUGIN}.config').origin]))")
    out = subprocess.run([sys.executable, "-S", "-c", probe], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    walked, origin = json.loads(out.stdout)
    assert Path(origin).is_relative_to(source)  # importable from the editable source...
    assert f"{PLUGIN}.config" not in walked  # ...but not found by walking the namespace

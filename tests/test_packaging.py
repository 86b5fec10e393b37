"""The wheel must carry every subpackage and every folder of conf/ (mapped to modelforge/conf)."""

from __future__ import annotations

from pathlib import Path

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
    import modelforge.config as paths

    (tmp_path / "modelforge" / "conf").mkdir(parents=True)
    (tmp_path / "modelforge" / "conf" / "train.yaml").write_text("{}")
    monkeypatch.setattr(paths, "PACKAGE_DIR", tmp_path / "modelforge")
    assert paths.conf_dir() == tmp_path / "modelforge" / "conf"

"""``python -m modelforge list`` imports neither Hydra nor OmegaConf, and prints what it printed when it did.

The command registers the built-ins' names without their defaults in Hydra's ConfigStore and reads the composite
blocks' YAML with PyYAML, resolving scalars as OmegaConf does; these tests hold its output to the output of the
same command in a process where Hydra, OmegaConf and every default are loaded (``run_main``, in this process).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from modelforge.cli.listing import _read_yaml
from modelforge.config import to_plain
from modelforge.errors import ConfigError
from modelforge.files.yaml_files import load_yaml_file
from tests.conftest import REPO, child_env

# Scalars where PyYAML's safe loader and OmegaConf's differ (1e-5, a date), and ones where they agree.
TRICKY_BLOCK = textwrap.dedent("""\
    # a comment with an ampersand: Tan & Le
    my_block:
      description: a block of the user's own
      params:
        width: ???
        eps: 1e-5
        ratio: 0.25
        flag: true
        when: 2024-01-01
        nothing: null
        big: 1_000
        hexa: 0x1F
        huge: .inf
        quoted: "1e-5"
      nodes: {}
    """)

LIST_IN_A_FRESH_PROCESS = textwrap.dedent("""
    import contextlib, io, json, runpy, sys
    sys.argv = ["modelforge", *sys.argv[1:]]
    with contextlib.redirect_stdout(io.StringIO()) as shown, contextlib.suppress(SystemExit):
        runpy.run_module("modelforge", run_name="__main__")
    heavy = ("hydra", "omegaconf", "pytorch_lightning", "lightning")
    print(json.dumps({"loaded": [m for m in heavy if m in sys.modules], "stdout": shown.getvalue()}))
""")


@pytest.fixture()
def user_folder(tmp_path: Path) -> Path:
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "my_net.yaml").write_text("# My own net: three convs\nname: cnn\n")
    (tmp_path / "blocks").mkdir()
    (tmp_path / "blocks" / "mine.yaml").write_text(TRICKY_BLOCK)
    return tmp_path


@pytest.mark.e2e
@pytest.mark.parametrize("args", [[], ["blocks", "*conv*"], ["models"]], ids=["all", "blocks-glob", "models"])
def test_list_imports_no_hydra_and_prints_what_the_full_load_prints(run_main, user_folder: Path,
                                                                     args: list[str]) -> None:
    argv = ["list", *args, "--config-dir", str(user_folder)]
    out = subprocess.run([sys.executable, "-c", LIST_IN_A_FRESH_PROCESS, *argv], capture_output=True, text=True,
                         timeout=300, cwd=REPO, env=child_env())
    assert out.returncode == 0, out.stderr[-3000:]
    light = json.loads(out.stdout.strip().splitlines()[-1])
    assert light["loaded"] == []
    full = run_main(*argv)  # this process: Hydra, OmegaConf and the built-ins' defaults all loaded
    assert full.returncode == 0, full.stderr
    assert light["stdout"] == full.stdout
    if not args:
        assert "my_block(width, eps=1e-05, ratio=0.25, flag=True, when=2024-01-01" in light["stdout"]
        assert f"My own net [{user_folder / 'model'}/my_net.yaml]" in " ".join(light["stdout"].split())


@pytest.mark.parametrize("path", sorted((REPO / "conf" / "blocks").glob("*.yaml")), ids=lambda p: p.name)
def test_a_shipped_blocks_file_reads_as_omegaconf_reads_it(path: Path) -> None:
    assert _read_yaml(path) == to_plain(load_yaml_file(path))


@pytest.mark.parametrize("text", [
    TRICKY_BLOCK,
    "a: &x {k: 1}\nb: *x\n",  # an anchor: the full reader, which bounds aliases
    "a:\n  p: ${oc.env:HOME,home}\n",  # an interpolation, resolved by the full reader
], ids=["scalars", "alias", "interpolation"])
def test_a_users_blocks_file_reads_as_omegaconf_reads_it(tmp_path: Path, text: str) -> None:
    (tmp_path / "b.yaml").write_text(text)
    assert _read_yaml(tmp_path / "b.yaml") == to_plain(load_yaml_file(tmp_path / "b.yaml"))


@pytest.mark.parametrize("text", ["a: 1\na: 2\n", "a: {b: ?\n"], ids=["duplicate-key", "syntax"])
def test_a_file_the_full_reader_refuses_is_refused_with_its_error(tmp_path: Path, text: str) -> None:
    (tmp_path / "b.yaml").write_text(text)
    with pytest.raises(ConfigError) as expected:
        load_yaml_file(tmp_path / "b.yaml")
    with pytest.raises(ConfigError) as got:
        _read_yaml(tmp_path / "b.yaml")
    assert str(got.value) == str(expected.value)


COMPOSE_AFTER_LIST = textwrap.dedent("""
    import contextlib, io, json, sys
    hydra_first = sys.argv[1] == "hydra-first"
    if hydra_first:
        from hydra import compose, initialize_config_dir
    from modelforge.__main__ import main
    with contextlib.redirect_stdout(io.StringIO()):
        main(["list", "models"])
    light = "hydra" not in sys.modules
    if hydra_first:  # Hydra's own API: the defaults were stored as list loaded the names
        from modelforge.config import conf_dir
        with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
            built = compose("train", overrides=["model=cnn"])["model"]["kernel_size"]
    else:  # modelforge's API stores the defaults that list left out
        import modelforge
        built = modelforge.compose_model_config("cnn", [])["kernel_size"]
    print(json.dumps({"light": light, "kernel_size": built}))
""")


@pytest.mark.e2e
@pytest.mark.parametrize("order", ["hydra-first", "list-alone"])
def test_a_composition_after_list_finds_the_built_ins_defaults(order: str) -> None:
    out = subprocess.run([sys.executable, "-c", COMPOSE_AFTER_LIST, order], capture_output=True, text=True,
                         timeout=300, cwd=REPO, env=child_env())
    assert out.returncode == 0, out.stderr[-3000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == {"light": order == "list-alone", "kernel_size": 3}

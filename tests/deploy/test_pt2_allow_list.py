"""The .pt2 allow-list refuses, before torch reads a byte of it, the crafted archives that test_no_file_runs_code.py
does not send: a weight whose stated shape its bytes cannot hold (torch would allocate the shape: a memory bomb), a
member that unpacks to more than the archive (a zip bomb), and program JSON whose strings torch would turn into
Python source (a node name, a control character) or into a pytree type. Each starts from a clean export, edited
as an attacker would (payloads.edited), and the clean one passes the same check."""

from __future__ import annotations

import io
import json
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest

from modelforge.deploy.pt2_archive import ArchiveRefused, check_pt2_archive
from tests.deploy import payloads


@pytest.fixture(scope="module")
def clean(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return payloads.clean_pt2(tmp_path_factory.mktemp("pt2") / "clean.pt2")


def _program_edit(change: Callable[[dict], None]) -> Callable[[dict[str, bytes]], None]:
    return lambda members: payloads._edit_program(members, change)


def _weight_of_shape(members: dict[str, bytes]) -> None:
    name = "data/weights/model_weights_config.json"
    config = json.loads(members[name])
    config["config"]["linear.weight"]["tensor_meta"]["sizes"] = [{"as_int": 100_000}, {"as_int": 100_000}]
    members[name] = json.dumps(config).encode()


def _node_named(name: str) -> Callable[[dict[str, bytes]], None]:
    def change(program: dict) -> None:
        program["graph_module"]["graph"]["nodes"][0]["name"] = name
    return _program_edit(change)


def _stack_trace(text: str) -> Callable[[dict[str, bytes]], None]:
    def change(program: dict) -> None:
        program["graph_module"]["graph"]["nodes"][0]["metadata"]["stack_trace"] = text
    return _program_edit(change)


def _out_spec_type(kind: str) -> Callable[[dict[str, bytes]], None]:
    def change(program: dict) -> None:
        program["graph_module"]["module_call_graph"][0]["signature"]["out_spec"] = json.dumps(
            [1, {"type": kind, "context": "null", "children_spec": []}])
    return _program_edit(change)


CRAFTED = {
    "a weight larger than its bytes": (_weight_of_shape,
                                       r"states a weight 'linear\.weight' \(data/weights/weight_0\) of shape "
                                       r"\[100000, 100000\] \(40,000,000,000 bytes\), and its record holds 31,360: "
                                       r"refused before allocating"),
    "a node name that is code": (_node_named("flatten; import os"), r"holds 'flatten; import os' in graph_module/"
                                                                    r"graph/nodes/name, where a name belongs"),
    "a control character": (_stack_trace("x\n\x0bimport os"), r"holds a control character in graph_module/graph/"
                                                              r"nodes/metadata/stack_trace"),
    "a pytree type of another kind": (_out_spec_type("collections.namedtuple"),
                                      r"takes or gives a 'collections\.namedtuple' in graph_module/module_call_graph/"
                                      r"signature/out_spec"),
}


def test_the_clean_export_passes(clean: Path) -> None:
    check_pt2_archive(clean.read_bytes())


@pytest.mark.parametrize("crafted", list(CRAFTED))
def test_a_crafted_program_is_refused_unread(crafted: str, clean: Path, tmp_path: Path) -> None:
    edit, refusal = CRAFTED[crafted]
    evil = payloads.edited(clean, tmp_path / "evil.pt2", edit)
    with pytest.raises(ArchiveRefused, match=refusal):
        check_pt2_archive(evil.read_bytes())


def test_a_member_that_unpacks_past_the_archive_is_refused_unpacked(clean: Path) -> None:
    buffer = io.BytesIO()
    with zipfile.ZipFile(clean) as source, zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as bomb:
        for info in source.infolist():
            bomb.writestr(info, source.read(info))
        root = source.namelist()[0].split("/", 1)[0]
        bomb.writestr(f"{root}/extra/zeros", bytes(50_000_000), compress_type=zipfile.ZIP_DEFLATED)
    data = buffer.getvalue()
    with pytest.raises(ArchiveRefused, match=rf"^holds {root}/extra/zeros, which unpacks to 50,000,000 bytes from an "
                                             rf"archive of {len(data):,} \(a zip bomb\): refused before unpacking$"):
        check_pt2_archive(data)

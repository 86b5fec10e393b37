"""Loading a ``.pt2`` so that nothing in it runs: read once, inspected whole, then given to torch from memory.

``torch.export.load`` unpickles a weight or constant saved with ``use_pickle`` and the sample inputs with
``weights_only=False`` (after a ``weights_only=True`` try), unpickles "opaque" constants with ``pickle.loads``,
runs the compiled code of an AOTInductor package, and trusts the program's JSON
(:mod:`modelforge.deploy.pt2_program`). So the archive's bytes are read once into memory and every member is
checked against what ``torch.export.save`` writes for a modelforge model:

- members: the program, raw weights and tensor constants, the sample inputs, extra files, the format's
  markers; anything else (compiled code, pickled objects, legacy pickled weights, a second model) is refused;
- a pickled weight or constant is refused, not unpickled: modelforge's exports store plain tensors raw, and only
  a tensor subclass is pickled (a weights-only unpickle would refuse most of those anyway, and a refusal
  needs no trust in the unpickler matching what torch's full one does);
- each raw tensor's stated shape must fit its bytes (torch allocates a zero tensor of the stated shape
  for an empty record: a memory bomb);
- the sample inputs are unpickled with torch's weights-only unpickler and must be plain tensors: torch's own
  first try is the same call on the same bytes, so it succeeds and its ``weights_only=False`` retry never runs.

Then ``torch.export.load`` reads the very bytes checked (an ``io.BytesIO``): the file is not opened again, so
it cannot be swapped between the check and the load.
"""

from __future__ import annotations

import io
import json
import logging
import math
import re
import warnings
import zipfile
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch

from modelforge.deploy.pt2_program import ProgramRefused, check_program

# The members of an archive torch.export.save writes (below its one root folder), "model" being the program's name.
ALLOWED_MEMBERS = re.compile(
    r"archive_format|archive_version|byteorder|\.data/version|\.data/serialization_id|models/model\.json"
    r"|data/sample_inputs/model\.pt|data/weights/model_weights_config\.json|data/weights/weight_\d+"
    r"|data/constants/model_constants_config\.json|data/constants/tensor_\d+|extra/[\w.-]+")
# Why a member outside them is refused, by its place: the ones torch.export.load would run or unpickle.
RUNS = (("data/aotinductor/", "compiled native code (AOTInductor), which loading would run"),
        ("data/constants/custom_obj_", "a pickled TorchScript object, which torch.export.load would unpickle"),
        ("data/constants/opaque_obj_", "a pickled Python object, which torch.export.load would unpickle and so run"),
        ("data/weights/", "pickled weights (the legacy format), which torch.export.load would unpickle"),
        ("data/constants/", "pickled constants (the legacy format), which torch.export.load would unpickle"),
        ("models/", "a second program; modelforge's exports hold one, named model"))
PAYLOAD_CONFIGS = {"weights": "data/weights/model_weights_config.json",
                   "constants": "data/constants/model_constants_config.json"}
MAX_MEMBERS = 100_000
# torch.export's serialized dtypes (torch._export.serde.schema.ScalarType) -> bytes an element (torch 2.13).
DTYPE_BYTES = {1: 1, 2: 1, 28: 2, 3: 2, 4: 4, 5: 8, 6: 2, 7: 4, 8: 8, 9: 4, 10: 8, 11: 16, 12: 1, 13: 2, 29: 1, 30: 1,
               31: 1, 32: 1, 33: 1, 34: 4, 35: 8}


class ArchiveRefused(ValueError):
    """Why a ``.pt2`` is not loaded, in words that follow the file's name."""


def check_pt2_archive(data: bytes) -> None:
    """Raise ArchiveRefused unless the ``.pt2`` archive ``data`` holds only what the module's docstring allows."""
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
        infos = archive.infolist()
    except (zipfile.BadZipFile, zlib.error, EOFError, ValueError) as exc:
        raise ArchiveRefused(f"is damaged: its zip archive does not read back ({exc})") from None
    if len(infos) > MAX_MEMBERS:
        raise ArchiveRefused(f"holds {len(infos):,} members, more than a torch.export program's")
    if bomb := next((info for info in infos if info.file_size > len(data)), None):  # torch stores members unpacked
        raise ArchiveRefused(f"holds {bomb.filename}, which unpacks to {bomb.file_size:,} bytes from an archive of "
                             f"{len(data):,} (a zip bomb): refused before unpacking")
    roots = {info.filename.split("/", 1)[0] for info in infos}
    if len(roots) != 1:
        raise ArchiveRefused("is not a torch.export program: its members are not in one folder")
    root = roots.pop() + "/"
    members = {info.filename[len(root):]: info for info in infos if not info.is_dir()}
    for name in members:
        if not ALLOWED_MEMBERS.fullmatch(name):
            why = next((what for place, what in RUNS if name.startswith(place)), None)
            raise ArchiveRefused(f"holds {name}: {why or 'no member torch.export.save writes'}; refused unopened")
    for needed in ("archive_format", "models/model.json", "data/sample_inputs/model.pt", *PAYLOAD_CONFIGS.values()):
        if needed not in members:
            raise ArchiveRefused(f"is not a whole torch.export program: it has no {needed}")

    def read(name: str) -> bytes:
        try:
            return archive.read(members[name])
        except (zipfile.BadZipFile, zlib.error, EOFError, ValueError, OSError) as exc:
            raise ArchiveRefused(f"is damaged: {name} does not read back ({exc})") from None

    for kind, config_name in PAYLOAD_CONFIGS.items():
        _check_payloads(kind, _json(read(config_name), config_name), members)
    try:
        check_program(_json(read("models/model.json"), "models/model.json"))
    except ProgramRefused as exc:
        raise ArchiveRefused(f"has a program (models/model.json) that {exc}") from None
    _check_sample_inputs(read("data/sample_inputs/model.pt"))


def _json(data: bytes, name: str) -> Any:
    try:
        return json.loads(data)
    except (ValueError, RecursionError):
        raise ArchiveRefused(f"is damaged: {name} is not JSON") from None


def _check_payloads(kind: str, config: Any, members: dict[str, zipfile.ZipInfo]) -> None:
    """Each weight or constant: stored raw (never pickled), in a member of the archive its shape fits."""
    entries = config.get("config") if isinstance(config, dict) else None
    if not isinstance(entries, dict):
        raise ArchiveRefused(f"is damaged: its {kind} list is not a mapping")
    folder = PAYLOAD_CONFIGS[kind].rsplit("/", 1)[0]
    for name, entry in entries.items():
        entry = entry if isinstance(entry, dict) else {}
        where = f"{kind[:-1]} {str(name)[:80]!r} ({folder}/{str(entry.get('path_name'))[:40]})"
        if entry.get("use_pickle") is not False:
            raise ArchiveRefused(f"holds a pickled {where}, which torch.export.load would unpickle with "
                                 "weights_only=False; modelforge's exports store plain tensors raw")
        member = f"{folder}/{entry.get('path_name')}"
        if member not in members:
            raise ArchiveRefused(f"is damaged: its {where} is not in the archive")
        meta = entry.get("tensor_meta") if isinstance(entry.get("tensor_meta"), dict) else {}
        listed = meta.get("sizes")
        listed = listed if isinstance(listed, list) else [None]
        sizes = [s.get("as_int") if isinstance(s, dict) else None for s in listed]
        element = DTYPE_BYTES.get(meta.get("dtype"))
        if element is None or not all(isinstance(s, int) and s >= 0 for s in sizes):
            raise ArchiveRefused(f"is damaged: its {where} has no plain shape and dtype")
        stored, wanted = members[member].file_size, math.prod(sizes) * element
        if wanted > max(stored, 0) and not (stored and _fits_strided(meta, stored, element)):
            raise ArchiveRefused(f"states a {where} of shape {sizes} ({wanted:,} bytes), and its record holds "
                                 f"{stored:,}: refused before allocating")


def _fits_strided(meta: dict[str, Any], stored: int, element: int) -> bool:
    """A view (an expanded or strided tensor) may need fewer bytes than its shape: the furthest element counts."""
    sizes = [s.get("as_int") for s in meta.get("sizes") or []]
    strides = [s.get("as_int") if isinstance(s, dict) else None for s in meta.get("strides") or []]
    offset = (meta.get("storage_offset") or {}).get("as_int", 0)
    if len(strides) != len(sizes) or not all(isinstance(s, int) and s >= 0 for s in [*strides, offset]):
        return False
    last = offset + sum((n - 1) * s for n, s in zip(sizes, strides)) if all(sizes) else 0
    return (last + 1) * element <= stored


def _check_sample_inputs(data: bytes) -> None:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            inputs = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except Exception:  # noqa: BLE001 - the weights-only unpickler's refusal, or a damaged pickle: both refused
        raise ArchiveRefused("holds sample inputs that torch's weights-only unpickler refuses (torch.export.load "
                             "would unpickle them with weights_only=False)") from None
    if not all(type(leaf) in (torch.Tensor, torch.nn.Parameter) for leaf in _leaves(inputs)):
        raise ArchiveRefused("holds sample inputs that are not tensors; modelforge's exports take a tensor")


def _leaves(value: Any) -> Iterator[Any]:
    if isinstance(value, (tuple, list)):
        for item in value:
            yield from _leaves(item)
    elif isinstance(value, dict):
        for key, item in value.items():
            yield key if not isinstance(key, str) or not key.isidentifier() else torch.empty(0)
            yield from _leaves(item)
    else:
        yield value


def load_checked_program(data: bytes) -> Any:
    """The ``torch.export`` program in the ``.pt2`` bytes ``data``, checked first (ArchiveRefused)."""
    check_pt2_archive(data)
    with _torch_quiet():
        return torch.export.load(io.BytesIO(data))


@contextmanager
def _torch_quiet() -> Iterator[None]:
    """torch.export.load logs a failed load's traceback as a warning: the caller's one line says it."""
    logger = logging.getLogger("torch.export")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        logger.setLevel(level)

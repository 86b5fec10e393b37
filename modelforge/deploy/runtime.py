"""Running the model ``predict`` is given, whatever its form: a checkpoint or run directory (the eager
module :func:`~modelforge.deploy.load.load_model` rebuilds), or an exported file (``.pt2`` through
``torch.export.load``, ``.onnx`` through onnxruntime, TorchScript ``.pt``/``.ts``), each with the metadata
it carries (:func:`~modelforge.deploy.metadata.read_metadata`): input shape, normalization, class names.
"""

from __future__ import annotations

import io
import math
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from modelforge.deploy.images import MAX_PIXELS
from modelforge.errors import CheckpointError, ConfigError

EXPORTED_SUFFIXES = {".pt2": "pt2", ".onnx": "onnx", ".pt": "torchscript", ".ts": "torchscript"}
NEEDED_METADATA = ("input_shape", "normalize", "class_names")


@dataclass
class Runner:
    """A model as ``predict`` runs it: ``forward`` maps float32 [N, C, H, W] to logits [N, K] on the CPU.

    ``batch_size`` is the one batch size an exported program accepts (None: any); ``source`` says what runs.
    """

    forward: Callable[[torch.Tensor], torch.Tensor]
    meta: dict[str, Any]
    source: str
    batch_size: int | None = None

    def __call__(self, batch: torch.Tensor, chunk: int = 256) -> torch.Tensor:
        """Logits of ``batch``, ``chunk`` images at a time (or the fixed batch size, the last one zero-padded)."""
        size = self.batch_size or chunk
        outputs = []
        with torch.inference_mode():
            for start in range(0, len(batch), size):
                part = batch[start:start + size]
                if self.batch_size and len(part) < size:
                    part = torch.cat([part, part.new_zeros((size - len(part), *part.shape[1:]))])
                output = self.forward(part)
                if not isinstance(output, torch.Tensor):  # a feature-map model's dict, a tuple
                    raise ConfigError("ckpt_path", f"{self.source} returns a {type(output).__name__}, not one "
                                      "tensor of class scores: predict reads a classifier's scores",
                                      hint="a model of feature maps (features=[...]) is a backbone: predict with "
                                      "the classifier it was cut from")
                outputs.append(output[:len(batch) - start].float())
        return torch.cat(outputs) if outputs else torch.empty(0)


def check_model_path(path: str | Path) -> Path:
    """``path`` if something is there (the checks that need to read it come with loading)."""
    if path is None or str(path).strip() == "":
        raise ConfigError("ckpt_path", "missing: which model to run", allowed="a .ckpt, a run directory, or an "
                          "exported .pt2, .onnx or TorchScript .pt file",
                          hint="predict ckpt_path=RUN/checkpoints/last.ckpt inputs=DIR")
    found = Path(str(path)).expanduser()
    if not found.exists():
        raise CheckpointError(f"ckpt_path: no checkpoint, run directory or exported model at {found.resolve()}")
    return found


def open_model(model_or_path: nn.Module | Runner | str | Path, max_pixels: int = MAX_PIXELS) -> Runner:
    """A :class:`Runner` for a module (one :func:`~modelforge.deploy.load.load_model` gave), a checkpoint,
    a run directory, or an exported ``.pt2``, ``.onnx`` or TorchScript file.

    An exported file is read once: its metadata, the checks that nothing in it runs code
    (:mod:`~modelforge.deploy.pt2_archive`, :mod:`~modelforge.deploy.script_archive`) and the load all see
    those bytes. ``max_pixels``: the most values an input image of the model may have (its metadata's
    ``input_shape``), checked before anything of that size is made.
    """
    if isinstance(model_or_path, Runner):
        return model_or_path
    if isinstance(model_or_path, nn.Module):
        return eager_runner(model_or_path, max_pixels)
    path = check_model_path(model_or_path)
    kind = EXPORTED_SUFFIXES.get(path.suffix.lower()) if path.is_file() else None
    if kind is None:
        from modelforge.deploy.load import load_model

        return eager_runner(load_model(path), max_pixels)
    from modelforge.deploy.metadata import metadata_in

    try:
        data = path.read_bytes()
        meta = checked_metadata(metadata_in(path, data), str(path), max_pixels)
    except CheckpointError as exc:  # damaged, or no metadata: say which option named the file
        raise CheckpointError(f"ckpt_path: {exc}") from None
    except OSError as exc:
        raise CheckpointError(f"ckpt_path: {path} cannot be read ({exc.strerror or exc})") from None
    return {"pt2": _program_runner, "onnx": _onnx_runner, "torchscript": _torchscript_runner}[kind](path, data, meta)


def eager_runner(model: nn.Module, max_pixels: int = MAX_PIXELS) -> Runner:
    meta = getattr(model, "modelforge_meta", None)
    if meta is None:
        raise ConfigError("model", f"this {type(model).__name__} carries no modelforge_meta (input shape, "
                          "normalization, class names)", hint="load it with modelforge.load_model(PATH)")
    if meta.get("normalize_unknown"):
        raise CheckpointError(f"the model's input normalization is unknown: {meta['normalize_unknown']}")
    model.eval()
    where = getattr(model, "checkpoint_path", None)
    name = (getattr(model, "model_config", None) or meta.get("model") or {}).get("name", type(model).__name__)
    source = f"{name} from {where}" if where else str(name)
    return Runner(model, checked_metadata(meta, "the model", max_pixels), source)


def checked_metadata(meta: Mapping[str, Any], where: str, max_pixels: int = MAX_PIXELS) -> dict[str, Any]:
    """``meta`` when it holds what preprocessing needs, else a CheckpointError naming ``where``. An input shape
    of more than ``max_pixels`` values an image is refused before any tensor of it is made (a file's metadata
    may say ``[1, 60000, 60000]``: 14 GB a batch of one)."""
    missing = [key for key in NEEDED_METADATA if key not in meta]
    shape = meta.get("input_shape")
    if missing or not isinstance(shape, (list, tuple)) or len(shape) != 3 or \
            not all(isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in shape):
        problem = f"lacks {', '.join(missing)}" if missing else f"has input_shape {shape!r}, not [C, H, W]"
        raise CheckpointError(f"{where}: its modelforge metadata {problem}: export it again with "
                              "`python -m modelforge export`")
    if (values := math.prod(shape)) > max_pixels:
        raise CheckpointError(f"{where}: its modelforge metadata says input_shape {list(shape)}, {values:,} values "
                              f"an image, more than max_pixels={max_pixels:,}: refused before allocating "
                              "(raise max_pixels if the model really takes images that large)")
    return dict(meta)


def _described(path: Path, meta: Mapping[str, Any], runs_on: str) -> str:
    return f"{(meta.get('model') or {}).get('name', 'model')} from {path} ({runs_on})"


def _program_runner(path: Path, data: bytes, meta: dict[str, Any]) -> Runner:
    from modelforge.deploy.pt2_archive import ArchiveRefused, load_checked_program

    try:
        program = load_checked_program(data)
    except ArchiveRefused as exc:
        raise CheckpointError(f"ckpt_path: {path} {exc}") from None
    except Exception as exc:  # noqa: BLE001 - any failure to deserialize means the same to the user
        raise CheckpointError(f"ckpt_path: {path} is not a loadable torch.export program ({_first_line(exc)})") \
            from None
    placeholders = {n.name: n for n in program.graph.nodes if n.op == "placeholder"}
    first = placeholders.get(program.graph_signature.user_inputs[0]) if program.graph_signature.user_inputs else None
    size = first.meta.get("val").shape[0] if first is not None and first.meta.get("val") is not None else None
    return Runner(program.module(), meta, _described(path, meta, "torch.export program"),
                  batch_size=size if isinstance(size, int) else None)  # a SymInt: any batch size


def _onnx_runner(path: Path, data: bytes, meta: dict[str, Any]) -> Runner:
    from modelforge.deploy.metadata import onnx_model
    from modelforge.deploy.script_archive import onnx_refusal

    try:
        import onnxruntime
    except ImportError:
        raise CheckpointError("running an .onnx file needs onnxruntime: pip install onnxruntime") from None
    if why := onnx_refusal(onnx_model(path, data)):
        raise CheckpointError(f"ckpt_path: {path} {why}")
    try:
        session = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"])
    except Exception as exc:  # noqa: BLE001 - onnxruntime's own exception kinds
        raise CheckpointError(f"ckpt_path: {path} is not an ONNX model onnxruntime can load "
                              f"({_first_line(exc)})") from None
    first = session.get_inputs()[0]
    size = first.shape[0] if first.shape and isinstance(first.shape[0], int) else None  # a name: any batch size

    def forward(batch: torch.Tensor) -> torch.Tensor:
        return torch.from_numpy(session.run(None, {first.name: batch.numpy()})[0])

    return Runner(forward, meta, _described(path, meta, "onnxruntime"), batch_size=size)


def _torchscript_runner(path: Path, data: bytes, meta: dict[str, Any]) -> Runner:
    from modelforge.deploy.script_archive import torchscript_refusal

    if why := torchscript_refusal(data):
        raise CheckpointError(f"ckpt_path: {path} {why}")
    try:
        with warnings.catch_warnings():  # "torch.jit.load is deprecated": the user chose this file; it still runs
            warnings.filterwarnings("ignore", message=r".*torch\.jit\.load. is deprecated", category=DeprecationWarning)
            module = torch.jit.load(io.BytesIO(data), map_location="cpu")
    except Exception as exc:  # noqa: BLE001 - RuntimeError for most, but not all, bad files
        raise CheckpointError(f"ckpt_path: {path} is not a loadable TorchScript file ({_first_line(exc)})") from None
    return Runner(module.eval(), meta, _described(path, meta, "TorchScript"))


def _first_line(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return (lines[0] if lines else type(exc).__name__)[:300]

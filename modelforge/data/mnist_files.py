"""The four MNIST files: where they live, what they must contain, and fetching them.

Nothing here imports Lightning, so checking or fetching the data stays cheap to import.
"""

from __future__ import annotations

import hashlib
import http.client
import os
import socket
import tempfile
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from modelforge.config import user_cache_dir
from modelforge.data import decoded_cache
from modelforge.data.idx import (
    IMAGES_MAGIC,
    LABELS_MAGIC,
    gunzip,
    parse_idx,
    read_file_bytes,
)
from modelforge.errors import DataError


@dataclass(frozen=True)
class MnistFile:
    """One of the four files: its base name (no ``.gz``), split, kind, and known contents."""

    name: str
    split: str  # "train" or "test"
    kind: str  # "images" or "labels"
    size: int  # bytes once uncompressed
    md5: str  # of the uncompressed bytes, so .gz and raw copies check alike
    dataset: str = "mnist"  # the data option it belongs to (data=<dataset>)
    title: str = "MNIST"  # the data set's name in messages

    @property
    def magic(self) -> int:
        return IMAGES_MAGIC if self.kind == "images" else LABELS_MAGIC


MNIST_FILES: tuple[MnistFile, ...] = (
    MnistFile("train-images-idx3-ubyte", "train", "images", 47040016, "6bbc9ace898e44ae57da46a324031adb"),
    MnistFile("train-labels-idx1-ubyte", "train", "labels", 60008, "a25bea736e30d166cdddb491f175f624"),
    MnistFile("t10k-images-idx3-ubyte", "test", "images", 7840016, "2646ac647ad5339dbf082846283269ea"),
    MnistFile("t10k-labels-idx1-ubyte", "test", "labels", 10008, "27ae3e4e09519cfbb04c329615203637"),
)

# Tried in order; each serves <mirror><name>.gz (torchvision's and TensorFlow's copies).
# md5 -> file of every known data set (datasets.py registers the others), for "this is Fashion-MNIST".
_KNOWN_BY_MD5: dict[str, MnistFile] = {f.md5: f for f in MNIST_FILES}

MIRRORS: tuple[str, ...] = (
    "https://ossci-datasets.s3.amazonaws.com/mnist/",
    "https://storage.googleapis.com/cvdf-datasets/mnist/",
)
DOWNLOAD_TIMEOUT_S = 30.0
_MAX_DOWNLOAD_BYTES = 64 << 20  # the largest MNIST .gz is 9.9 MB; more is not MNIST
_HINT = ("put the four files (.gz or uncompressed) there, or point data.data_dir=/path/to/them "
         "(or the MODELFORGE_DATA environment variable) at a folder that holds them")


@dataclass(frozen=True)
class _Decoded:
    """One file read, gunzipped, hashed and decoded: what a process keeps of it."""

    tensor: torch.Tensor | None
    nbytes: int  # uncompressed
    md5: str
    error: DataError | None  # a bad header, raised after the size and md5 checks


# Every file is read, gunzipped, hashed and decoded once per process and per file version
# (path, mtime, size): prepare_data, setup and test all ask for it, as may a second run.
_decoded_cache: dict[tuple[str, int, int, int], _Decoded] = {}


def resolve_data_dir(data_dir: str | Path | None = None, name: str = "mnist") -> Path:
    """The folder that holds (or will hold) the data set ``name``, as an absolute path.

    ``data_dir`` when given, else (MNIST only) ``$MODELFORGE_DATA``, else a per-user cache
    folder (``$XDG_CACHE_HOME/modelforge/<name>``, default ``~/.cache/modelforge/<name>``):
    never the run's working directory, so runs share one copy.
    """
    if (data_dir is None or str(data_dir) == "") and name == "mnist":
        data_dir = os.environ.get("MODELFORGE_DATA") or None
    if data_dir is None or str(data_dir) == "":
        cache = user_cache_dir()
        if cache is None:
            raise DataError(f"no folder for {name}: data.data_dir is unset and no home folder is known "
                            "($HOME unset, no user entry); set data.data_dir=/path/to/it"
                            + (" (or MODELFORGE_DATA)" if name == "mnist" else ""))
        return cache / "modelforge" / name
    # Relative paths are relative to the working directory; abspath also folds "..", so an
    # error names the folder that was really looked in.
    return Path(os.path.abspath(Path(data_dir).expanduser()))


def find_file(data_dir: Path, spec: MnistFile) -> Path | None:
    """The raw or ``.gz`` copy of ``spec`` in ``data_dir`` (raw first: no gunzip), if any."""
    for candidate in (data_dir / spec.name, data_dir / f"{spec.name}.gz"):
        if candidate.is_file():
            return candidate
    return None


def read_checked(path: Path, spec: MnistFile, *, verify: bool = True, cache: bool = True) -> torch.Tensor:
    """Read ``path`` as ``spec`` and return its uint8 tensor.

    The IDX header and length always get checked; ``verify`` adds the known size and md5.
    A file that is another known data set's says which one, and how to use it. ``cache``: a
    ``.gz`` file's uncompressed bytes come from (and go to) :mod:`modelforge.data.decoded_cache`.
    """
    decoded = _decode(path, spec.magic, cache)
    if verify and decoded.nbytes != spec.size:
        what = "truncated" if decoded.nbytes < spec.size else "too long"
        raise DataError(f"{path}: {what}: expected {spec.size} bytes (uncompressed), found {decoded.nbytes}; "
                        "delete it so that it can be fetched again" + _identify_hint(decoded.md5, spec))
    if decoded.error is not None:
        raise decoded.error
    if verify and decoded.md5 != spec.md5:
        raise DataError(f"{path}: checksum mismatch: md5 of the uncompressed bytes is {decoded.md5}, "
                        f"expected {spec.md5}; the file is damaged or not the original {spec.title}"
                        + _identify_hint(decoded.md5, spec))
    return decoded.tensor


def register_known_files(files: tuple[MnistFile, ...]) -> None:
    """Files of another known data set, so that a mismatch can say which set a file belongs to."""
    _KNOWN_BY_MD5.update({f.md5: f for f in files})


def _identify_hint(digest: str, spec: MnistFile) -> str:
    known = _KNOWN_BY_MD5.get(digest)
    if known is not None and known.dataset != spec.dataset:
        return f"\n  this is {known.title}: use data={known.dataset}"
    return ("\n  hint: for a data set of your own in IDX format (checksums off, stats computed), use "
            "data=idx data.data_dir=DIR; data.verify=false skips the checks for this one")


def _decode(path: Path, magic: int, cache: bool) -> _Decoded:
    """Read (gunzipping, or from the kept copy), hash and decode ``path`` once per process and file version."""
    stat = path.stat()
    key = (str(path.resolve()), stat.st_mtime_ns, stat.st_size, magic)
    if key not in _decoded_cache:
        data, digest = _uncompressed(path, cache)
        tensor, error = None, None
        try:
            tensor = parse_idx(data, magic=magic, where=str(path))
        except DataError as exc:
            error = exc
        _decoded_cache[key] = _Decoded(tensor, len(data), digest, error)
    return _decoded_cache[key]


def _uncompressed(path: Path, cache: bool) -> tuple[bytes, str]:
    """The uncompressed bytes of ``path`` and their md5; a kept copy of a ``.gz`` file's when ``cache``."""
    packed = read_file_bytes(path)
    if path.suffix != ".gz":
        return packed, hashlib.md5(packed, usedforsecurity=False).hexdigest()
    source = decoded_cache.source_key(packed) if cache else None
    kept = decoded_cache.find(source) if source else None
    if kept is not None:
        return kept
    data = gunzip(packed, where=path)
    digest = hashlib.md5(data, usedforsecurity=False).hexdigest()
    if source:
        decoded_cache.keep(source, data, digest)
    return data, digest


def ensure_files(
    data_dir: str | Path | None = None,
    *,
    download: bool = True,
    verify: bool = True,
    mirrors: Sequence[str] = MIRRORS,
    files: Sequence[MnistFile] = MNIST_FILES,
    timeout: float = DOWNLOAD_TIMEOUT_S,
) -> dict[str, Path]:
    """Find each file in ``data_dir``, downloading the missing ones; map name -> path.

    Raises:
        DataError: once, listing every file still missing, the mirrors tried and why they failed.
    """
    root = resolve_data_dir(data_dir, files[0].dataset if files else "mnist")
    found = {spec.name: find_file(root, spec) for spec in files}
    missing = [spec for spec in files if found[spec.name] is None]
    failures: dict[str, list[str]] = {m: [] for m in mirrors}
    created: list[Path] = []
    if missing and download:
        created = _make_writable_dir(root, [spec.name for spec in missing], _title(files))
        for spec in missing:
            found[spec.name] = _download(spec, root, mirrors, failures, verify=verify, timeout=timeout)
    still_missing = [spec.name for spec in files if found[spec.name] is None]
    if still_missing:
        _remove_empty(created)  # a failed run leaves no empty folders behind (a mistyped path)
        raise DataError(_missing_message(root, still_missing, failures, download, _title(files)))
    return {name: path for name, path in found.items() if path is not None}


def load_mnist(
    data_dir: str | Path | None = None,
    *,
    download: bool = True,
    verify: bool = True,
    mirrors: Sequence[str] = MIRRORS,
    files: Sequence[MnistFile] = MNIST_FILES,
    timeout: float = DOWNLOAD_TIMEOUT_S,
    image_size: tuple[int, int] | None = (28, 28),
    n_classes: int | None = 10,
    cache: bool = True,
) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """Fetch if needed, check and read MNIST (or another set of four IDX files: ``files``).

    Returns ``{"train" | "test": (images uint8 [N, H, W], labels int64 [N])}``; the other
    arguments are those of :func:`ensure_files`. ``image_size`` and ``n_classes`` (labels in
    ``0..n_classes-1``) are checked unless None. ``cache``: keep ``.gz`` files gunzipped in the
    user cache (:mod:`modelforge.data.decoded_cache`), so the next run skips the gunzip.
    """
    paths = ensure_files(data_dir, download=download, verify=verify, mirrors=mirrors, files=files,
                         timeout=timeout)
    arrays = {spec.name: read_checked(paths[spec.name], spec, verify=verify, cache=cache) for spec in files}
    splits = {}
    for split in ("train", "test"):
        images_spec, labels_spec = (_pick(files, split, kind) for kind in ("images", "labels"))
        images, labels = arrays[images_spec.name], arrays[labels_spec.name]
        where_images, where_labels = paths[images_spec.name], paths[labels_spec.name]
        if image_size is not None and tuple(images.shape[1:]) != tuple(image_size):
            raise DataError(f"{where_images}: images are {list(images.shape[1:])} pixels, "
                            f"expected {image_size[0]}x{image_size[1]}")
        if len(images) != len(labels):
            raise DataError(f"{where_images} holds {len(images)} images but {where_labels} "
                            f"holds {len(labels)} labels; they must match")
        if n_classes is not None and len(labels) and int(labels.max()) >= n_classes:
            raise DataError(f"{where_labels}: labels must be in 0..{n_classes - 1}, found {int(labels.max())}")
        splits[split] = (images, labels.long())
    return splits


def _title(files: Sequence[MnistFile]) -> str:
    return files[0].title if files else "MNIST"


def _make_writable_dir(root: Path, missing: list[str], title: str = "MNIST") -> list[Path]:
    """Downloads land in ``root``: make sure they can, before trying any mirror.

    Returns the folders this created, deepest first, so a failed download can remove them.
    """
    what = f"{title} files missing from data_dir {root}: {', '.join(missing)}"
    created = [p for p in (root, *root.parents) if not p.exists()]
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise DataError(f"{what}; the folder cannot be created ({e.strerror or e})\n  hint: {_HINT}") from e
    if not os.access(root, os.W_OK):
        raise DataError(f"{what}; the folder is not writable, so they cannot be downloaded there\n"
                        f"  hint: {_HINT}")
    return created


def _remove_empty(folders: list[Path]) -> None:
    for folder in folders:  # deepest first; stops at the first that is not empty
        try:
            folder.rmdir()
        except OSError:
            return


def _pick(files: Sequence[MnistFile], split: str, kind: str) -> MnistFile:
    for spec in files:
        if spec.split == split and spec.kind == kind:
            return spec
    raise ValueError(f"the file table has no {split} {kind}")


def _download(spec: MnistFile, root: Path, mirrors: Sequence[str], failures: dict[str, list[str]],
              *, verify: bool, timeout: float) -> Path | None:
    """Try each mirror for ``spec``; on success the verified file lands atomically in ``root``."""
    target = root / f"{spec.name}.gz"
    for mirror in mirrors:
        if failures[mirror] and failures[mirror][-1].startswith("unreachable"):
            continue  # one connection failure per mirror is enough; don't wait on it four times
        url = mirror.rstrip("/") + f"/{spec.name}.gz"
        tmp: Path | None = None
        try:
            fd, tmp_name = tempfile.mkstemp(prefix=f".{spec.name}.", suffix=".part.gz", dir=root)
            tmp = Path(tmp_name)
            with os.fdopen(fd, "wb") as out, urllib.request.urlopen(url, timeout=timeout) as response:
                _copy_bounded(response, out)
            read_checked(tmp, spec, verify=verify, cache=False)  # kept only once it is in place
            os.replace(tmp, target)  # atomic: a reader never sees half a file
            return target
        except (urllib.error.URLError, http.client.HTTPException, OSError, ValueError, DataError) as e:
            failures[mirror].append(_reason(e, spec, timeout))
        finally:
            if tmp is not None:
                tmp.unlink(missing_ok=True)
    return None


def _copy_bounded(response, out) -> None:
    total = 0
    while chunk := response.read(1 << 20):
        total += len(chunk)
        if total > _MAX_DOWNLOAD_BYTES:
            raise DataError(f"served more than {_MAX_DOWNLOAD_BYTES >> 20} MB")
        out.write(chunk)


def _reason(error: Exception, spec: MnistFile, timeout: float) -> str:
    """A few words on why a download failed."""
    if isinstance(error, urllib.error.HTTPError):
        return f"{spec.name}.gz: HTTP {error.code} {error.reason}"
    if isinstance(error, DataError):
        return f"{spec.name}.gz: downloaded file failed its check ({str(error).split(': ', 1)[-1]})"
    cause = error.reason if isinstance(error, urllib.error.URLError) else error
    if isinstance(cause, (TimeoutError, socket.timeout)):
        return f"unreachable (no answer within {timeout:g} s)"
    if isinstance(cause, socket.gaierror):
        return "unreachable (host name not resolved: offline?)"
    if isinstance(cause, ConnectionRefusedError):
        return "unreachable (connection refused)"
    if isinstance(error, urllib.error.URLError):
        return f"unreachable ({cause})"
    return f"{spec.name}.gz: {error}"


def _missing_message(root: Path, missing: list[str], failures: dict[str, list[str]], download: bool,
                     title: str = "MNIST") -> str:
    lines = [f"{title} files missing from data_dir {root}: " + ", ".join(missing) + " (.gz or uncompressed)"]
    if not download:
        lines.append("  downloading is off (data.download=false)")
    elif not failures:
        lines.append("  no mirrors to download from (data.mirrors is empty)")
    else:
        lines.append("  downloading them failed:")
        for mirror, reasons in failures.items():
            lines.append(f"    {mirror}: " + ("; ".join(dict.fromkeys(reasons)) or "not tried"))
    lines.append(f"  hint: {_HINT}")
    return "\n".join(lines)

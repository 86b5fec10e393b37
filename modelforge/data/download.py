"""Where a data set's four files live, and fetching the missing ones with ``torch.hub``."""

from __future__ import annotations

import os
import socket
import urllib.error
import uuid
from collections.abc import Sequence
from pathlib import Path

from torch.hub import download_url_to_file

from modelforge.config import user_cache_dir
from modelforge.data.idx import FILE_NAMES, IdxDataset, read_checked
from modelforge.errors import DataError

# Where a distribution's package installs a data set (Debian: apt-get install dataset-fashion-mnist).
SYSTEM_DIRS = {"fashion_mnist": Path("/usr/share/datasets/fashion-mnist")}
SYSTEM_PACKAGES = {"fashion_mnist": "dataset-fashion-mnist"}  # the Debian/Ubuntu package that installs them there


def resolve_data_dir(data_dir: str | Path | None = None, name: str = "mnist") -> Path:
    """The absolute folder of the data set ``name``: ``data_dir``, else (MNIST only) ``$MODELFORGE_DATA``,
    else its system package's folder when installed (SYSTEM_DIRS), else ``$XDG_CACHE_HOME/modelforge/<name>``
    (default ``~/.cache/...``): never the run's directory."""
    if not data_dir and name == "mnist":
        data_dir = os.environ.get("MODELFORGE_DATA")
    if not data_dir and name in SYSTEM_DIRS and SYSTEM_DIRS[name].is_dir():
        return SYSTEM_DIRS[name]
    if not data_dir:
        cache = user_cache_dir()
        if cache is None:
            raise DataError(f"no folder for {name}: data.data_dir is unset and no home folder is known "
                            "($HOME unset, no user entry); set data.data_dir=/path/to/it"
                            + (" (or MODELFORGE_DATA)" if name == "mnist" else ""))
        return cache / "modelforge" / name
    # abspath also folds "..", so an error names the folder really looked in.
    return Path(os.path.abspath(Path(data_dir).expanduser()))


def find_file(root: Path, name: str) -> Path | None:
    """The uncompressed (read first: no gunzip) or ``.gz`` copy of ``name`` in ``root``, if any."""
    return next((p for p in (root / name, root / f"{name}.gz") if p.is_file()), None)


def ensure_files(root: Path, dataset: IdxDataset | None, *, download: bool = True,
                 mirrors: Sequence[str] | None = None, timeout: float = 30.0) -> dict[str, Path]:
    """Each of the four files in ``root``, those missing fetched from ``mirrors`` (default: ``dataset``'s).

    Raises a DataError naming every file still missing, why fetching failed, and what to do."""
    found = {name: find_file(root, name) for name in FILE_NAMES}
    mirrors = list(mirrors if mirrors is not None else dataset.mirrors if dataset is not None else ())
    failures: list[str] = []
    if dataset is not None and download and mirrors and not all(found.values()):
        failures = _download(found, root, dataset, mirrors, timeout)
    missing = [name for name, path in found.items() if path is None]
    if not missing:
        return found
    lines = [f"{dataset.title if dataset else 'IDX'} files missing from data_dir {root}: {', '.join(missing)} "
             "(.gz or uncompressed)"]
    if dataset is not None:  # data=idx: a folder of one's own has nowhere to be fetched from
        lines += (["  downloading is off (data.download=false)"] if not download else
                  ["  no mirrors to download from (data.mirrors is empty)"] if not mirrors else failures)
    source = f" from {mirrors[0]}" if dataset is not None and mirrors else ""
    env = " (or MODELFORGE_DATA)" if dataset is not None and dataset.name == "mnist" else ""
    lines.append(f"  hint: put {', '.join(n + '.gz' for n in missing)}{source} (or their uncompressed copies) "
                 f"into that folder, or point data.data_dir=/path/to/them{env} at a folder that holds them")
    if dataset is not None and (package := SYSTEM_PACKAGES.get(dataset.name)):  # a way without a network
        lines.append(f"    or, offline, install Debian/Ubuntu's package: apt-get install {package} (from the "
                     f"distribution's mirror), which puts them in {SYSTEM_DIRS[dataset.name]}, read when "
                     "data.data_dir is unset")
    raise DataError("\n".join(lines))


def _download(found: dict[str, Path | None], root: Path, dataset: IdxDataset, mirrors: Sequence[str],
              timeout: float) -> list[str]:
    """Fetch what ``found`` lacks into ``root``, filling ``found`` in; returns what went wrong, as message lines."""
    created = [p for p in (root, *root.parents) if not p.exists()]
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        return [f"  the folder cannot be created ({e.strerror or e}), so they cannot be downloaded there"]
    if not os.access(root, os.W_OK):
        return ["  the folder is not writable, so they cannot be downloaded there"]
    failures = []
    for mirror in mirrors:
        for name in [n for n, path in found.items() if path is None]:
            try:
                found[name] = _fetch(f"{mirror.rstrip('/')}/{name}.gz", root, name, dataset, timeout)
            except (OSError, DataError) as e:
                failures.append(f"    {mirror}: {_why(e, name)}")
                if not isinstance(e, (urllib.error.HTTPError, DataError)):
                    break  # unreachable: not worth a wait per file
    if not all(found.values()):
        for folder in created:  # deepest first: a failed run leaves no empty folders (a mistyped path)
            try:
                folder.rmdir()
            except OSError:
                break
    return ["  downloading them failed:", *failures] if failures else []


def _fetch(url: str, root: Path, name: str, dataset: IdxDataset, timeout: float) -> Path:
    """Download ``url``, check it as ``name``, then move it in place: atomic, so no reader sees half a file."""
    tmp, target = root / f".{name}.{uuid.uuid4().hex}.gz", root / f"{name}.gz"
    previous = socket.getdefaulttimeout()
    socket.setdefaulttimeout(timeout)  # download_url_to_file takes no timeout of its own
    try:
        download_url_to_file(url, str(tmp), progress=False)
        read_checked(tmp, name, dataset)
        os.replace(tmp, target)
        return target
    finally:
        socket.setdefaulttimeout(previous)
        tmp.unlink(missing_ok=True)


def _why(error: Exception, name: str) -> str:
    if isinstance(error, DataError):
        return f"{name}.gz: downloaded file failed its check ({str(error).split(': ', 1)[-1]})"
    if isinstance(error, urllib.error.HTTPError):
        return f"{name}.gz: HTTP {error.code} {error.reason}"
    return f"unreachable ({getattr(error, 'reason', None) or error})"

"""What produced a run besides its config: the software (torch, Lightning, Python, modelforge's commit) and the data
files read (a fingerprint). ``metrics.json`` records both, so ``python -m modelforge diff`` can compare two runs."""

from __future__ import annotations

import hashlib
import platform
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any

CONTENT_LIMIT = 1 << 30  # bytes of data hashed whole; a larger folder is fingerprinted by names, sizes and times


def environment() -> dict[str, Any]:
    """The versions a run ran with, and modelforge's git commit where it runs from a checkout."""
    import pytorch_lightning
    import torch

    versions = {"python": platform.python_version(), "torch": torch.__version__,
                "lightning": pytorch_lightning.__version__}
    try:
        versions["modelforge"] = metadata.version("modelforge")
    except metadata.PackageNotFoundError:
        pass
    if commit := git_commit(Path(__file__).resolve().parents[2]):
        versions["modelforge_commit"] = commit
    return versions


def git_commit(folder: Path) -> str | None:
    """``folder``'s checkout's commit, with ``+dirty`` when its tracked files differ from it; None outside one."""
    if not (folder / ".git").exists():
        return None  # an installed wheel: its version says it
    try:
        head = subprocess.run(["git", "-C", str(folder), "rev-parse", "HEAD"], capture_output=True, text=True,
                              timeout=10)
        dirty = subprocess.run(["git", "-C", str(folder), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):  # no git on the machine
        return None
    if head.returncode != 0:
        return None
    return head.stdout.strip() + ("+dirty" if dirty.returncode == 0 and dirty.stdout.strip() else "")


def data_folder(datamodule: Any) -> Path | None:
    """The folder a data module reads its files from: an image folder's root, an IDX set's data dir."""
    if (root := getattr(datamodule, "root", None)) is not None:
        return Path(root)
    if hasattr(datamodule, "data_dir") and hasattr(datamodule, "name"):
        from modelforge.data.download import resolve_data_dir

        return resolve_data_dir(datamodule.data_dir, datamodule.name)
    return None


def data_fingerprint(datamodule: Any) -> dict[str, Any] | None:
    """A sha256 over the files of the data's folder (their names and contents; beyond ``CONTENT_LIMIT`` bytes, their
    names, sizes and modification times): equal fingerprints, the same data read. None when the data has no folder."""
    folder = data_folder(datamodule)
    if folder is None or not folder.is_dir():
        return None
    files = sorted(p for p in folder.rglob("*") if p.is_file() and not any(
        part.startswith(".") for part in p.relative_to(folder).parts))
    size = sum(p.stat().st_size for p in files)
    by_content = size <= CONTENT_LIMIT
    digest = hashlib.sha256()
    for path in files:
        digest.update(path.relative_to(folder).as_posix().encode() + b"\0")
        if by_content:
            content = hashlib.sha256()
            with path.open("rb") as handle:
                for chunk in iter(lambda: handle.read(1 << 20), b""):
                    content.update(chunk)
            digest.update(content.digest())
        else:
            stat = path.stat()
            digest.update(f"{stat.st_size} {stat.st_mtime_ns}".encode())
    return {"folder": str(folder.absolute()), "files": len(files), "bytes": size,
            "sha256": digest.hexdigest(), "of": "contents" if by_content else "names, sizes and times"}

"""Fetching torchvision's weight files as torchvision does: torch.hub's download, hash check and cache.

``torchvision.models.resnet50(weights=...)`` calls ``torch.hub.load_state_dict_from_url(url, check_hash=True)``:
the file goes to ``$TORCH_HOME/hub/checkpoints/<name>`` (``torch.hub.get_dir()``), its SHA-256 checked against the
digits its name ends in. Here the same download (``torch.hub.download_url_to_file``, the call it makes) fills the
same cache; the file is then read as any ``init.from`` file is (``weights_only=True``). A file found in the cache is
checked against its hash too: it may have been put there by hand.
"""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path

import torch.hub

from modelforge.errors import CheckpointError
from modelforge.weights.torchvision_zoo import TorchvisionWeights

CHUNK = 1 << 20


def cache_path(weights: TorchvisionWeights) -> Path:
    """Where torch.hub keeps the file (torchvision's models look there too)."""
    return Path(torch.hub.get_dir()) / "checkpoints" / weights.file


def hash_prefix(weights: TorchvisionWeights) -> str:
    match = torch.hub.HASH_REGEX.search(weights.file)  # resnet50-11ad3fa6.pth -> 11ad3fa6
    return match.group(1) if match else ""


def fetch(weights: TorchvisionWeights, key: str = "init.from") -> Path:
    """The local file of ``weights``: from torch.hub's cache, else downloaded into it.

    Raises:
        CheckpointError: no network (one line naming the URL and the path to put the file at), or a file whose
            SHA-256 is not the one its name gives.
    """
    path = cache_path(weights)
    if os.path.lexists(path) and not path.is_file():  # a folder or a link to nothing where the file goes
        raise CheckpointError(f"{key}: {path}, where torch.hub keeps {weights.file}, is not a file (a folder, or a "
                              "link that leads nowhere): remove it, and run again to download the file there")
    if not path.is_file():
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise CheckpointError(f"{key}: cannot make torch.hub's cache folder {path.parent} ({exc.strerror or exc}) "
                                  f"to download {weights.label} into: set TORCH_HOME to a folder you can write") from None
        if not os.access(path.parent, os.W_OK | os.X_OK):
            raise CheckpointError(f"{key}: torch.hub's cache folder {path.parent} is not writable: "
                                  f"{weights.label} cannot be downloaded into it; set TORCH_HOME to a folder you can "
                                  f"write, or put {weights.url} at {path}")
        try:
            torch.hub.download_url_to_file(weights.url, str(path), hash_prefix=hash_prefix(weights),
                                           progress=sys.stderr.isatty())
        except OSError as exc:  # URLError, a refused connection, a timeout, a full disk
            raise CheckpointError(f"{key}: cannot download {weights.label} from {weights.url} "
                                  f"({getattr(exc, 'reason', exc)}): put that file at {path} and run again") from None
        except RuntimeError as exc:  # torch.hub: "invalid hash value (expected ..., got ...)"; nothing is kept
            raise CheckpointError(f"{key}: the download of {weights.url} is damaged ({exc}); run again") from None
        return path
    digest = _sha256(path)
    if not digest.startswith(hash_prefix(weights)):
        raise CheckpointError(f"{key}: {path} is not {weights.label}: its SHA-256 begins {digest[:len(hash_prefix(weights))]},"
                              f" the file's name says {hash_prefix(weights)}; remove it, or put {weights.url} there")
    return path


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()

"""Gunzipped copies of ``.gz`` data files in the user cache, so that later runs skip the gunzip.

Gunzipping and hashing MNIST's four files takes about 0.3 s per process on a small CPU; reading
the ``.gz`` files to hash them (SHA-1) and their kept copies (md5) takes about half of that.
An entry is named
``<sha1 of the .gz bytes>.<md5 of the uncompressed bytes>.idx``:

- the first part is the key: a changed ``.gz`` file has another SHA-1, so it can never be served
  a stale copy (no dates involved), and copies of the same file in several folders share one entry;
- the second part checks the entry itself: every read hashes the uncompressed bytes anyway (for
  the data set's own md5 check), and an entry whose bytes do not match its name is damaged: it is
  deleted, and the file is gunzipped and kept again.

Keeping a copy is best effort: a cache folder that cannot be written (read-only, full disk)
costs only the gunzip, with one warning per process. Writes are atomic, so runs that keep the same
file at once (a sweep, DDP ranks) each leave a whole entry or none; what a writer killed mid-write
left behind is deleted by a later read of that entry. The folder only grows (one entry per
distinct ``.gz`` file read); deleting it at any time is safe.
"""

from __future__ import annotations

import hashlib
import logging
import time
from pathlib import Path

from modelforge.config import user_cache_dir
from modelforge.train.records import write_bytes

log = logging.getLogger(__name__)
STALE_TEMP_S = 600.0  # a temp file this old is a killed writer's, not a running one's
_warned: set[Path] = set()  # folders already warned about in this process


def cache_dir() -> Path | None:
    """``$XDG_CACHE_HOME/modelforge/decoded`` (default ``~/.cache/modelforge/decoded``); None without a home folder."""
    base = user_cache_dir()
    return None if base is None else base / "modelforge" / "decoded"


def source_key(packed: bytes) -> str:
    """The key of a ``.gz`` file's bytes."""
    return hashlib.sha1(packed, usedforsecurity=False).hexdigest()


def find(key: str) -> tuple[bytes, str] | None:
    """The kept uncompressed bytes for ``key`` and their md5, or None (damaged entries are deleted)."""
    folder = cache_dir()
    if folder is None:
        return None
    _remove_stale_temp_files(folder, key)
    try:
        entries = sorted(folder.glob(f"{key}.*.idx"))
    except OSError:
        return None
    for entry in entries:
        try:
            data = entry.read_bytes()
        except OSError:
            continue
        digest = hashlib.md5(data, usedforsecurity=False).hexdigest()
        if entry.name == _entry_name(key, digest):
            return data, digest
        log.info("dropping damaged cache entry %s (its bytes have md5 %s)", entry, digest)
        _unlink(entry)
    return None


def keep(key: str, data: bytes, digest: str) -> None:
    """Keep ``data`` (md5 ``digest``) under ``key``; a folder that cannot take it gets one warning per process."""
    folder = cache_dir()
    if folder is None:
        _warn_once(Path("~"), "no home folder is known ($HOME unset, no user entry); set XDG_CACHE_HOME")
        return
    try:
        # No fsync: a copy torn by a power cut fails the md5 check of the next read and is made again.
        write_bytes(folder / _entry_name(key, digest), data, durable=False)
    except OSError as exc:  # DiskFullError is an OSError too
        _warn_once(folder, str(exc))


def _warn_once(folder: Path, reason: str) -> None:
    if folder not in _warned:
        _warned.add(folder)
        log.warning("could not keep a gunzipped copy of the data in %s (%s); each run gunzips the "
                    "files again (data.cache_decoded=false stops trying)", folder, reason)


def _remove_stale_temp_files(folder: Path, key: str) -> None:
    """Delete what writers of ``key``'s entry killed mid-write left (``.NAME.*.tmp``, see atomic_io).

    Only old ones: a writer that is still running (another job keeping the same file) takes
    seconds, and its temp file must stay. Every read looks, so a leftover goes even once the entry
    exists and nobody writes it again.
    """
    now = time.time()
    try:
        leftovers = list(folder.glob(f".{key}.*.idx.*.tmp"))
    except OSError:
        return
    for tmp in leftovers:
        try:
            if now - tmp.stat().st_mtime > STALE_TEMP_S:
                tmp.unlink()
        except OSError:
            pass


def _entry_name(key: str, digest: str) -> str:
    return f"{key}.{digest}.idx"


def _unlink(path: Path) -> None:
    try:
        path.unlink()
    except OSError:
        pass

"""``create_model``'s compositions, kept for the life of the process.

Hydra composes a model file in about 0.1 s whatever the model (parsing the YAML with a pure-Python loader and
making OmegaConf nodes, its own ``hydra/`` group included): as long as torch takes to construct a small model.
A second ``create_model`` of the same name, overrides and config folders reuses the first one's model config
instead, unless something it was composed from has changed since:

- a ``.yaml`` file under those folders, seen by path, size, modification and change times and inode (as
  git sees a file), and by its contents when it changed in the last two seconds;
- an entry of Hydra's ``ConfigStore`` (a structured config stored again is a new node; one changed in place
  is not seen).

A config whose values call a resolver (``${oc.env:HOME}``, ``${now:%H}``) is resolved again on every call, so
what those read is never kept. One that Hydra cannot compose the same way twice is composed on every call: a
defaults list that calls a resolver (``- /blocks@fc: ${oc.env:BLOCK}``), or a ``shuffle(...)`` override. The
first call in a process always composes: :func:`cache_info` counts both.
"""

from __future__ import annotations

import copy
import hashlib
import os
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import yaml
from omegaconf import DictConfig, OmegaConf

RACY_S = 2  # a file changed this recently is hashed as well (see _files_state)
MAX_ENTRIES = 64  # model configs are a few kB; a process rarely composes more than a handful
# ${name:...} (and ${${key}:...}, a resolver named by a value); ${key} alone reads the config itself
_RESOLVER_CALL = re.compile(r"\$\{\s*(?:[A-Za-z_][\w.]*|\$\{[^}]*\})\s*:")
_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class CacheInfo(NamedTuple):
    """Compositions reused and made, as ``functools.lru_cache``'s ``cache_info()`` reports them."""

    hits: int
    misses: int
    entries: int


@dataclass(frozen=True)
class _Entry:
    run_cfg: DictConfig
    model: dict[str, Any] | None  # resolved once, when no value calls a resolver
    store_nodes: tuple[Any, ...]  # held so that the ids in the key stay theirs


class ComposedModels:
    """Model configs by (name, overrides, folders, the state of their files and of the ConfigStore)."""

    def __init__(self) -> None:
        self._entries: OrderedDict[tuple, _Entry] = OrderedDict()
        self._lock = threading.Lock()
        self._hits = self._misses = 0

    def get(self, name: str, overrides: Sequence[str], folders: Sequence[Path],
            compose: Callable[[], DictConfig], to_model: Callable[[DictConfig], dict[str, Any]]) -> dict[str, Any]:
        """The model config ``to_model(compose())`` gives, reused while nothing it read has changed (a copy:
        the caller may change it)."""
        state = _files_state(folders)
        files = (name, tuple(overrides), tuple(str(f) for f in folders), state)
        nodes = _store_nodes()
        key = (*files, tuple((path, id(node)) for path, node in nodes))
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None:
                self._entries.move_to_end(key)
                self._hits += 1
        if entry is None:
            run_cfg = compose()
            model = to_model(run_cfg)  # an error here is raised on every call: nothing is kept
            with self._lock:
                self._misses += 1
            if _chosen_while_composing(overrides, state):
                return model  # what Hydra picks may differ next time: composed on every call
            nodes = _store_nodes()  # Hydra stores its own configs on its first compose in a process
            key = (*files, tuple((path, id(node)) for path, node in nodes))
            entry = _Entry(run_cfg, model if not _calls_resolver(run_cfg) else None, tuple(n for _, n in nodes))
            with self._lock:
                self._entries[key] = entry
                while len(self._entries) > MAX_ENTRIES:
                    self._entries.popitem(last=False)
            return copy.deepcopy(model)
        if entry.model is not None:
            return copy.deepcopy(entry.model)
        fresh = copy.deepcopy(entry.run_cfg)
        OmegaConf.clear_cache(fresh)  # a resolver registered with use_cache (now) answers anew, as in a new compose
        return to_model(fresh)

    def cache_info(self) -> CacheInfo:
        with self._lock:
            return CacheInfo(self._hits, self._misses, len(self._entries))

    def clear(self) -> None:
        """Forget every composition (the next ``create_model`` of each composes again)."""
        with self._lock:
            self._entries.clear()
            self._hits = self._misses = 0


def _files_state(folders: Sequence[Path]) -> tuple[tuple[str, int, int, int, int, bytes], ...]:
    """Every YAML file under ``folders``: path, size, modification time, inode and change time (conf/'s 84 files:
    ~0.3 ms). A file put in place by ``cp -p``/``rsync -a``/``tar x`` keeps its size and mtime but not its inode
    or change time.

    A file changed in the last ``RACY_S`` seconds is also read and hashed: the kernel stamps times from a clock
    that ticks every few milliseconds, so two writes of the same size in one tick leave the same stamp (git
    hashes such "racily clean" files for the same reason)."""
    state: list[tuple[str, int, int, int, int, bytes]] = []
    now = time.time_ns()
    folders_left = [str(folder) for folder in reversed(folders)]
    seen: set[tuple[int, int]] = set()  # folders by device and inode: a link to a folder above is read once
    while folders_left:
        try:
            folder = folders_left.pop()
            st = os.stat(folder)
            if (st.st_dev, st.st_ino) in seen:
                continue
            seen.add((st.st_dev, st.st_ino))
            entries = sorted(os.scandir(folder), key=lambda entry: entry.name, reverse=True)
        except OSError:  # a folder gone or unreadable: Hydra cannot read it either
            continue
        for entry in entries:
            try:
                if entry.is_dir():
                    folders_left.append(entry.path)
                elif entry.name.endswith((".yaml", ".yml")):
                    st = entry.stat()
                    recent = now - max(st.st_mtime_ns, st.st_ctime_ns) < RACY_S * 1e9
                    state.append((entry.path, st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns,
                                  _digest(entry.path) if recent else b""))
            except OSError:  # gone between the listing and the stat
                continue
    return tuple(state)


def _digest(path: str) -> bytes:
    try:
        return hashlib.blake2b(Path(path).read_bytes(), digest_size=16).digest()
    except OSError:
        return b"?"


def _store_nodes() -> list[tuple[str, Any]]:
    """Each entry of Hydra's ConfigStore with its path (``model_defaults/graph.yaml``)."""
    from hydra.core.config_store import ConfigStore

    found: list[tuple[str, Any]] = []
    stack: list[tuple[str, dict]] = [("", ConfigStore.instance().repo)]
    while stack:
        prefix, group = stack.pop()
        for name, value in group.items():
            if isinstance(value, dict):
                stack.append((f"{prefix}{name}/", value))
            else:
                found.append((f"{prefix}{name}", value))
    return sorted(found, key=lambda pair: pair[0])


def _chosen_while_composing(overrides: Sequence[str], state: tuple[tuple[Any, ...], ...]) -> bool:
    """Whether Hydra makes a choice while composing that may differ between calls: an override that shuffles, or
    a defaults list that calls a resolver (``- /blocks@fc: ${oc.env:BLOCK}``), whose pick the composed config
    does not show. Only files whose text calls a resolver are parsed (conf/: 7 of 84)."""
    if any("shuffle(" in override for override in overrides):
        return True
    for path, *_ in state:
        try:
            text = Path(path).read_text(encoding="utf-8", errors="replace")
        except OSError:
            return True
        if not _RESOLVER_CALL.search(text):
            continue
        try:
            root = yaml.compose(text, Loader=_YAML_LOADER)  # nodes: aliases are not expanded
        except yaml.YAMLError:
            return True  # Hydra will say what is wrong with it
        if isinstance(root, yaml.MappingNode) and any(
                key.value == "defaults" and _calls_in_node(value) for key, value in root.value):
            return True
    return False


def _calls_in_node(node: yaml.Node) -> bool:
    """Whether a scalar under ``node`` calls a resolver (each node looked at once, however often aliased)."""
    seen, left = set(), [node]
    while left:
        node = left.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, yaml.ScalarNode):
            if _RESOLVER_CALL.search(str(node.value)):
                return True
        elif isinstance(node, yaml.MappingNode):
            left.extend(part for pair in node.value for part in pair)
        elif isinstance(node, yaml.SequenceNode):
            left.extend(node.value)
    return False


def _calls_resolver(cfg: DictConfig) -> bool:
    """Whether a value of ``cfg`` calls a resolver, whose result may differ between calls."""
    values = [OmegaConf.to_container(cfg, resolve=False)]
    while values:
        value = values.pop()
        if isinstance(value, dict):
            values.extend(value.values())
        elif isinstance(value, list):
            values.extend(value)
        elif isinstance(value, str) and _RESOLVER_CALL.search(value):
            return True
    return False


COMPOSED = ComposedModels()


def cache_info() -> CacheInfo:
    """How many ``create_model`` calls reused a composition, how many composed, and how many are kept."""
    return COMPOSED.cache_info()


def cache_clear() -> None:
    """Forget every kept composition."""
    COMPOSED.clear()

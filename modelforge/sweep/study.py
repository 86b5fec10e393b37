"""What an Optuna search is set to (``hydra.sweeper.*``), checked: its objectives and their directions, sampler,
pruner and the storage that holds its study.

Samplers and pruners are looked up by name in fixed tables, never imported from a config; their options are
checked against the Optuna class's signature. Storage: an SQLAlchemy URL (``sqlite:///FILE``,
``postgresql://USER@HOST/DB``, ``mysql+pymysql://...``), or ``journal:FILE`` for Optuna's journal file storage,
which needs no server (a shared filesystem is enough); none keeps the study in memory.
"""

from __future__ import annotations

import importlib.util
import inspect
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from modelforge.errors import ConfigError, UnknownKeyError, UnknownNameError
from modelforge.files.paths import check_writable

log = logging.getLogger(__name__)
SWEEPER = "hydra.sweeper"
BASIC_LAUNCHER = "hydra._internal.core_plugins.basic_launcher.BasicLauncher"  # Hydra's own _target_: compared only
SAMPLERS = {"tpe": "TPESampler", "random": "RandomSampler", "grid": "GridSampler", "cmaes": "CmaEsSampler",
            "nsgaii": "NSGAIISampler"}
PRUNERS = {"none": "NopPruner", "median": "MedianPruner", "successive_halving": "SuccessiveHalvingPruner",
           "hyperband": "HyperbandPruner"}
DIRECTIONS = ("maximize", "minimize")
SMALLER_IS_BETTER = ("params", "macs", "train_time_s")  # run records an objective may name, besides metrics
SQLITE_PREFIX, JOURNAL_PREFIX = "sqlite:///", "journal:"
DATABASES = ("sqlite", "postgresql", "mysql")
STORAGE_FORMS = "sqlite:///FILE, postgresql://USER@HOST[:PORT]/DB, mysql+pymysql://USER@HOST/DB, journal:FILE, null"
DRIVERS = {"postgresql": "'psycopg[binary]' (postgresql+psycopg://, and postgresql:// from SQLAlchemy 2.1) or "
                         "psycopg2-binary (postgresql+psycopg2://)",
           "mysql": "PyMySQL (mysql+pymysql://)"}


@dataclass(frozen=True)
class SearchSettings:
    """The checked ``hydra.sweeper`` settings of an Optuna search."""

    study_name: str
    storage: str | None
    objectives: tuple[str, ...]
    directions: tuple[str, ...]
    sampler: str
    seed: int | None
    pruner: str
    sampler_options: dict[str, Any] = field(default_factory=dict)
    pruner_options: dict[str, Any] = field(default_factory=dict)
    heartbeat_interval: int | None = None  # seconds; None: no heartbeat (a dead worker's trials stay RUNNING)
    grace_period: int | None = None  # seconds without a heartbeat that fail a trial; None: twice the interval
    retry_stale_trials: int = 0  # times a trial whose worker died is run again

    def make_sampler(self, seed: int | None, grid: dict[str, list[Any]] | None = None) -> Any:
        import optuna

        cls = getattr(optuna.samplers, SAMPLERS[self.sampler])
        given = {**self.sampler_options, **({"seed": seed} if seed is not None else {})}
        try:
            return cls(grid or {}, **given) if self.sampler == "grid" else cls(**given)
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"{SWEEPER}.sampler_options", f"{cls.__name__} refuses them: {exc}") from None

    def make_pruner(self) -> Any:
        import optuna

        cls = getattr(optuna.pruners, PRUNERS[self.pruner])
        try:
            return cls(**self.pruner_options)
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"{SWEEPER}.pruner_options", f"{cls.__name__} refuses them: {exc}") from None


def search_settings(sweeper: Mapping[str, Any], monitor: str | None, launcher: str | None) -> SearchSettings:
    """Check ``hydra.sweeper`` of an Optuna search; ``monitor``: the run's (the default objective);
    ``launcher``: ``hydra.launcher._target_`` (pruning needs the trial in this process)."""
    _check_counts(int(sweeper.get("n_trials", 0)), int(sweeper.get("n_jobs", 1)),
                  float(sweeper.get("max_failure_rate", 0.0)))
    objectives, directions = objectives_and_directions(sweeper, monitor)
    sampler = str(sweeper.get("sampler") or ("tpe" if len(objectives) == 1 else "nsgaii"))
    if sampler not in SAMPLERS:
        raise UnknownNameError("sampler", sampler, SAMPLERS, path=f"{SWEEPER}.sampler")
    if sampler == "cmaes" and importlib.util.find_spec("cmaes") is None:
        raise ConfigError(f"{SWEEPER}.sampler", "the cmaes sampler needs the cmaes package: pip install cmaes")
    pruner = str(sweeper.get("pruner") or "none")
    if pruner not in PRUNERS:
        raise UnknownNameError("pruner", pruner, PRUNERS, path=f"{SWEEPER}.pruner")
    if pruner != "none" and len(objectives) > 1:
        raise ConfigError(f"{SWEEPER}.pruner", f"{pruner}: Optuna prunes single-objective studies only, and this "
                          f"one has {len(objectives)} objectives", hint="hydra.sweeper.pruner=none")
    if pruner != "none" and launcher not in (None, BASIC_LAUNCHER):
        raise ConfigError(f"{SWEEPER}.pruner", f"{pruner}: pruning needs each trial's run in the sweep's own "
                          f"process (Hydra's basic launcher), not {launcher.rsplit('.', 1)[-1]}",
                          hint="leave hydra/launcher unset, or hydra.sweeper.pruner=none")
    storage = str(sweeper.get("storage") or "") or None
    if storage is not None:
        check_storage_url(storage)
        if (file := storage_file(storage)) is not None:
            check_writable(file, f"{SWEEPER}.storage", folder=False)
    seed = sweeper.get("seed")
    interval, grace, retries = _heartbeat(sweeper)
    return SearchSettings(study_name=str(sweeper.get("study_name") or "modelforge"), storage=storage,
                          objectives=objectives, directions=directions, sampler=sampler,
                          seed=None if seed is None else int(seed), pruner=pruner,
                          sampler_options=_options("sampler", SAMPLERS[sampler], sweeper.get("sampler_options")),
                          pruner_options=_options("pruner", PRUNERS[pruner], sweeper.get("pruner_options")),
                          heartbeat_interval=interval, grace_period=grace, retry_stale_trials=retries)


def objectives_and_directions(sweeper: Mapping[str, Any],
                              monitor: str | None) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The objectives of a search and their directions, checked; ``monitor``: the run's, the default objective."""
    objectives = tuple(str(o) for o in sweeper.get("objectives") or [monitor or "val/acc"])
    return objectives, _directions(sweeper.get("direction"), sweeper.get("directions"), objectives)


def _check_counts(n_trials: int, n_jobs: int, max_failure_rate: float) -> None:
    if n_trials < 0:
        raise ConfigError(f"{SWEEPER}.n_trials", f"must be 0 or more, got {n_trials}")
    if n_jobs < 1:
        raise ConfigError(f"{SWEEPER}.n_jobs", f"must be 1 or more (trials asked for at once), got {n_jobs}")
    if not 0.0 <= max_failure_rate <= 1.0:
        raise ConfigError(f"{SWEEPER}.max_failure_rate", f"must be in [0, 1], got {max_failure_rate}")


def _heartbeat(sweeper: Mapping[str, Any]) -> tuple[int | None, int | None, int]:
    """``heartbeat_interval``, ``grace_period`` and ``retry_stale_trials``, checked: whole seconds, and a grace
    period longer than the interval (else a worker's every pause between two heartbeats fails its trial)."""
    interval, grace = sweeper.get("heartbeat_interval"), sweeper.get("grace_period")
    retries = sweeper.get("retry_stale_trials") or 0
    for key, value in (("heartbeat_interval", interval), ("grace_period", grace)):
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
            raise ConfigError(f"{SWEEPER}.{key}", f"must be whole seconds, 1 or more, or null; got {value!r}")
    if not isinstance(retries, int) or isinstance(retries, bool) or retries < 0:
        raise ConfigError(f"{SWEEPER}.retry_stale_trials", f"must be 0 or more, got {retries!r}")
    if grace is not None and interval is not None and grace <= interval:
        raise ConfigError(f"{SWEEPER}.grace_period", f"{grace} s is not longer than the heartbeat interval "
                          f"({interval} s): live trials would be failed between two heartbeats",
                          hint=f"hydra.sweeper.grace_period={2 * interval}, or null (twice the interval)")
    if grace is not None and interval is None:
        raise ConfigError(f"{SWEEPER}.grace_period", "has no effect without hydra.sweeper.heartbeat_interval")
    return interval, grace, retries


def _directions(direction: Any, directions: Any, objectives: Sequence[str]) -> tuple[str, ...]:
    if direction is not None and directions is not None:
        raise ConfigError(f"{SWEEPER}.directions", "set direction (one objective) or directions (one per objective), "
                          "not both")
    if direction is not None:
        directions = [direction]
    if directions is None:  # as the best checkpoint's mode: smaller is better for losses, errors and sizes
        from modelforge.tasks import metric_mode

        return tuple("minimize" if metric_mode(o) == "min" or o in SMALLER_IS_BETTER else "maximize"
                     for o in objectives)
    for value in directions:
        if value not in DIRECTIONS:
            raise UnknownNameError("direction", value, DIRECTIONS, path=f"{SWEEPER}.directions")
    if len(directions) != len(objectives):
        raise ConfigError(f"{SWEEPER}.objectives", f"{len(directions)} directions ({', '.join(directions)}) for "
                          f"{len(objectives)} objective(s) ({', '.join(objectives)})",
                          hint="name one objective per direction, e.g. hydra.sweeper.objectives=[val/acc,params]")
    return tuple(str(d) for d in directions)


def _options(kind: str, class_name: str, options: Mapping[str, Any] | None) -> dict[str, Any]:
    """``options`` as keyword arguments of the Optuna class, each checked to be one of its arguments."""
    import optuna

    options = dict(options or {})
    cls = getattr(optuna.samplers if kind == "sampler" else optuna.pruners, class_name)
    accepted = sorted(set(inspect.signature(cls).parameters) - {"self", "seed", "search_space"})
    for key in options:
        if key not in accepted:
            raise UnknownKeyError(f"{SWEEPER}.{kind}_options.{key}", key, f"{class_name} takes no argument {key!r}",
                              accepted, hint="the seed is hydra.sweeper.seed" if key == "seed" else None)
    return options


def check_storage_url(url: str) -> None:
    """Raise ConfigError unless ``url`` is one of the storage forms an Optuna search takes."""
    if url.startswith(JOURNAL_PREFIX):
        if not url[len(JOURNAL_PREFIX):].strip():
            raise ConfigError(f"{SWEEPER}.storage", "journal: needs a file, e.g. journal:/shared/studies/mnist.log")
        return
    scheme = url.partition("://")[0].partition("+")[0]
    if "://" not in url or scheme not in DATABASES:
        raise ConfigError(f"{SWEEPER}.storage", f"{shown_url(url)!r} is not a storage Optuna can open",
                          allowed=STORAGE_FORMS)


def storage_file(url: str) -> Path | None:
    """The file that holds the study, for SQLite and journal storage; None for a server (or none)."""
    for prefix in (SQLITE_PREFIX, JOURNAL_PREFIX):
        if url.startswith(prefix):
            return Path(url[len(prefix):]).expanduser()
    return None


def shown_url(url: str) -> str:
    """``url`` with its password masked, for messages and logs."""
    if "://" not in url or "@" not in url:
        return url
    scheme, _, rest = url.partition("://")
    credentials, _, host = rest.rpartition("@")
    user, colon, _ = credentials.partition(":")
    return f"{scheme}://{user}{':***' if colon else ''}@{host}"


def open_storage(url: str | None, attempts: int = 3, heartbeat: Any = None) -> Any:
    """The Optuna storage for ``url`` (None: in memory), keeping the ``heartbeat`` of running trials
    (:class:`~modelforge.sweep.heartbeat.Heartbeat`; None: none). Several processes opening one new database
    together race to create its tables: a failed attempt is tried again after a pause."""
    if url is None:
        return None
    import warnings

    import optuna
    from optuna.exceptions import ExperimentalWarning

    if url.startswith(JOURNAL_PREFIX):
        from optuna.storages.journal import JournalFileBackend, JournalStorage

        path = storage_file(url)
        path.parent.mkdir(parents=True, exist_ok=True)
        return heartbeat.journal(path) if heartbeat else JournalStorage(JournalFileBackend(str(path)))
    from sqlalchemy.exc import SQLAlchemyError

    if (db := storage_file(url)) is not None:
        db.parent.mkdir(parents=True, exist_ok=True)
    for attempt in range(attempts):
        try:
            with warnings.catch_warnings():  # Optuna calls its heartbeat experimental
                warnings.simplefilter("ignore", ExperimentalWarning)
                return optuna.storages.RDBStorage(url, engine_kwargs={"pool_pre_ping": True} if db is None else None,
                                                  **(heartbeat.rdb_options() if heartbeat else {}))
        except ImportError as exc:  # Optuna's, from SQLAlchemy's for the driver module
            scheme, missing = url.partition("://")[0].partition("+")[0], getattr(exc.__cause__, "name", None)
            raise ConfigError(f"{SWEEPER}.storage", f"{shown_url(url)}: its database driver is not installed"
                              f"{f' ({missing})' if missing else ''}",
                              hint=f"pip install {DRIVERS.get(scheme, missing or 'the driver')}") from None
        except RuntimeError as exc:  # a study stored by an older Optuna: its tables need an upgrade
            raise ConfigError(f"{SWEEPER}.storage", f"{shown_url(url)}: {str(exc).splitlines()[0]}") from None
        except SQLAlchemyError as exc:
            if attempt + 1 == attempts:
                reason = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0]
                raise ConfigError(f"{SWEEPER}.storage", f"cannot open {shown_url(url)}: {reason}") from None
            log.info("opening %s failed (%s); trying again", shown_url(url), type(exc).__name__)
            time.sleep(0.5 * 2 ** attempt)
    return None

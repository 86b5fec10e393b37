"""Running a command as a Hydra app, which parses and composes once. modelforge adds what Hydra lacks: bounded
user YAML and ``model=FILE.yaml``, and each refusal as one ``error:`` (exit 2) with the closest name."""

from __future__ import annotations

import argparse
import contextlib
import functools
import os
import shlex
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from hydra import errors as hydra_errors
from hydra import version
# Hydra's internals, where it has no public API: its argument parser and run with parsed arguments (_run_hydra,
# below), its error report (run_and_report), and its config repository, which lists a group's options from conf/
# and the user's folders before any composition (the public listing needs a GlobalHydra that only the run makes).
from hydra._internal import utils as hydra_utils
from hydra._internal.config_loader_impl import ConfigLoaderImpl
from hydra._internal.config_repository import ConfigRepository
from hydra.core.config_search_path import SearchPathQuery
from hydra.core.config_store import ConfigStore
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from hydra.core.object_type import ObjectType
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Glob, Override
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf
from omegaconf import errors as omegaconf_errors

from modelforge import errors
from modelforge.cli.run_checks import Task
from modelforge.config import bound_yaml_file, conf_dir, load_yaml_file, omegaconf_error, yaml_file_error
from modelforge.config_shadows import check_not_shadowed, selected_configs, unread_file_error, user_yaml_files
from modelforge.errors import ConfigError, ModelforgeError, RunStopped, UnknownNameError
from modelforge.models.compose import config_folders, defaults_cycle_error
from modelforge.models.definitions import missing_defaults_hint
from modelforge.report.console import quiet_library_notices
from modelforge.sweep.callback import (
    exit_if_jobs_failed,
    register_optuna_sweeper,
    report_unfinished_sweeps,
)
from modelforge.sweep.ddp import fresh_ddp_state, sweep_job_argv
from modelforge.sweep.resume import RESUME_KEY, held_job, resume_hint
from modelforge.train.records import EXIT_CONFIG_ERROR, refuse

FULL_ERROR = "HYDRA_FULL_ERROR"  # Hydra's documented switch: raise errors instead of printing them
SEARCH_SPACE = "hydra.sweeper.params"  # the Optuna sweeper's; its keys hold dots (optim.lr)
CONDITIONS = "hydra.sweeper.conditions"  # {KEY: {OTHER: VALUES}}, dotted keys too


def run(task: Callable[[DictConfig], Any], config_name: str, argv: list[str]) -> int:
    """Run ``task`` as the Hydra app of config ``config_name`` over ``argv``; return the exit code."""
    for name, resolver in (("mf_uid", lambda: uuid.uuid4().hex[:6]), ("mf_config_groups", _help_groups)):
        if not OmegaConf.has_resolver(name):  # mf_uid, cached: two runs started in one second get two dirs
            OmegaConf.register_new_resolver(name, resolver, use_cache=name == "mf_uid")
    version.setbase("1.3")
    quiet_library_notices()  # hydra.verbose=true brings them back once the job starts (quiet_third_party)
    parser = hydra_utils.get_args_parser()
    # flags may come after overrides (`train model=x --config-dir d trainer.y=z`): argparse alone stops at them
    cmd = CommandLine(parser.parse_intermixed_args(argv), config_name, argv)  # a bad flag exits as Hydra would
    users_full_error, command = os.environ.get(FULL_ERROR), sys.argv[: len(sys.argv) - len(argv)]

    def job(cfg: DictConfig, checked: Any) -> Any:  # the task in the user's environment, its errors reported as ours
        sweep, saved_argv = HydraConfig.get().mode == RunMode.MULTIRUN, sys.argv
        _set_env(FULL_ERROR, users_full_error)  # the user's, for the job and the DDP ranks it starts
        # DDP ranks re-run sys.argv: in a sweep, this job
        sys.argv = sweep_job_argv(command, HydraConfig.get()) if sweep else saved_argv
        try:
            with fresh_ddp_state(), held_job(cfg, HydraConfig.get()) if sweep else contextlib.nullcontext() as kept:
                if kept is not None:  # resumed: a job that finished before is kept, with its value for the sweeper
                    return kept.get(str(kept.get("monitor") or "val/acc"))
                if sweep and cfg.get("ckpt_path") and not any(a.startswith("ckpt_path=") for a in sys.argv):
                    sys.argv.append(f"ckpt_path={cfg.ckpt_path}")  # resumed here: DDP ranks re-run argv, and resume too
                return task(cfg) if checked is None else task(cfg, checked)
        except (RunStopped, ModelforgeError) as exc:
            if not sweep or getattr(exc, "ends_sweep", False):
                if sweep and isinstance(exc, RunStopped):  # the sweep resumes, its jobs each from its own state
                    exc.resume_with = resume_hint(HydraConfig.get().sweep.dir)
                refuse(exc)  # with its exit code; a signal ends the sweep too
            if isinstance(exc, RunStopped):
                print(f"error: {exc}", file=sys.stderr)
            raise SweepJobError(f"{type(exc).__name__}: {exc}") from exc  # this job failed; the sweep goes on
        finally:
            sys.argv = saved_argv
            _set_env(FULL_ERROR, "1")

    try:
        _set_env(FULL_ERROR, "1")
        if cmd.args.experimental_rerun:  # it unpickles a file: a config must not run code
            raise ConfigError("--experimental-rerun", "not supported: run the command again")
        cmd.prepare()
        cmd.check_group_sweeps()
        register_optuna_sweeper()  # where Hydra's plugin scan misses it (an editable install)
        # Hydra's public entry, @hydra.main, parses sys.argv itself with parse_args, which stops at a flag given
        # after an override (`train model=x --config-dir d`), and checks and prepares nothing before composing:
        # _run_hydra is what it calls with the arguments parsed, and no public API takes parsed arguments.
        with _mode_from_the_flag() if cmd.mode_is_the_flags() else contextlib.nullcontext():
            hydra_utils._run_hydra(args=cmd.args, args_parser=parser, task_function=Task(job),
                                   config_path=str(conf_dir()), config_name=config_name)
        exit_if_jobs_failed()  # a sweep that went on past failed jobs (Optuna) still fails the command
        return 0
    except BaseException as exc:
        _set_env(FULL_ERROR, users_full_error)
        report_unfinished_sweeps()  # Hydra stops a sweep at a failed job without on_multirun_end
        if (lost := lost_job(exc)) is not None:  # submitit's: a job's process was killed, or failed
            print(f"error: {lost}", file=sys.stderr)
            return 1
        if (error := config_error(exc, cmd)) is None:  # Hydra's report and exit 1; SystemExit, ^C pass through
            hydra_utils.run_and_report(functools.partial(_reraise, exc))
        print(f"error: {error}", file=sys.stderr)
        return EXIT_CONFIG_ERROR
    finally:
        _set_env(FULL_ERROR, users_full_error)
        cmd.forget_stored()


@contextlib.contextmanager
def _mode_from_the_flag() -> Any:
    """Hydra composes the whole config once only to read ``hydra.mode`` (``Hydra.get_mode``), then composes it
    again for the run: where no config can set it, the mode is ``-m``'s, which Hydra takes when get_mode gives None.
    That saves each command a composition, 0.1-0.3 s (tests/sweep/test_run_mode.py). No public API skips it; Hydra's
    own issue (hydra-ecosystem/hydra#3440, open) proposes the same: remove this once a release reads the mode so."""
    from hydra._internal.hydra import Hydra

    saved = Hydra.get_mode
    Hydra.get_mode = lambda self, config_name, overrides: None  # type: ignore[method-assign]
    try:
        yield
    finally:
        Hydra.get_mode = saved  # type: ignore[method-assign]


def lost_job(exc: BaseException) -> str | None:
    """One line for submitit's error about a job that left no result (its process killed, or failed), naming the
    job's files and the resume switch; None for any other error. (Its own message is a traceback's worth.)"""
    submitit = sys.modules.get("submitit.core.utils")  # imported by its launcher: no sweep of it, no such error
    if submitit is None or not isinstance(exc, (submitit.UncompletedJobError, submitit.FailedJobError)):
        return None
    head = " ".join(str(exc).split("\n")[:2])
    return f"a job of the sweep left no result: {head}; resume the sweep with the same command and its " \
           f"hydra.sweep.dir and {RESUME_KEY}=true"


def _help_groups() -> str:
    """--help's groups, as Hydra lists them less Hydra's own and the generated ``*_defaults``, read from one
    repository (Hydra's own listing copies its whole config store for every group it looks at)."""
    _, repo = GlobalHydra.instance().hydra.config_loader._parse_overrides_and_create_caching_repo(None, [])
    lines, parents = [], [""]
    while parents:
        parent = parents.pop()
        for name in repo.get_group_options(parent, ObjectType.GROUP):
            group = f"{parent}/{name}" if parent else name
            if group.partition("/")[0] == "hydra" or group.endswith("_defaults"):
                continue
            if options := repo.get_group_options(group, ObjectType.CONFIG):
                lines.append(f"{group}: {', '.join(sorted(options))}")
            parents.append(group)
    return "".join(f"{line}\n" for line in sorted(lines))


def _set_env(name: str, value: str | None) -> None:
    os.environ.pop(name, None)
    os.environ.update({} if value is None else {name: value})


def _reraise(exc: BaseException) -> None:
    raise exc


class SweepJobError(hydra_errors.CompactHydraException):
    """A sweep job's error: Hydra records the job as failed and prints this kind in one line."""


class CommandLine:
    """Hydra's parse of a command's arguments, and the user's config folders they name."""

    def __init__(self, args: argparse.Namespace, config_name: str, argv: list[str] = ()) -> None:
        self.args, self.config_name, self.argv = args, args.config_name or config_name, list(argv)
        self.command = config_name  # each command's config is named as it
        try:
            self.overrides = OverridesParser.create().parse_overrides(args.overrides)
        except hydra_errors.HydraException:
            self.overrides = []  # Hydra reports the bad override when it composes
        self.folders = [f"file://{os.path.abspath(args.config_dir)}"] if args.config_dir else []
        self.stored: list[tuple[str, str]] = []  # (group, name) of each model=FILE.yaml stored in the ConfigStore
        self.folders += [str(v) for o in self.overrides if o.key_or_group == "hydra.searchpath" for v in _values(o)]

    def mode_is_the_flags(self) -> bool:
        """Whether ``-m`` alone says if this is a sweep: no ``hydra.mode`` override and no folder of the user's,
        whose configs could set it (no shipped config does)."""
        return not self.folders and not any(o.key_or_group == "hydra.mode" for o in self.overrides)

    def repository(self) -> ConfigRepository:
        """Hydra's configs in conf/, plugins and the user's folders (Hydra cleared its own)."""
        search_path = hydra_utils.create_automatic_config_search_path(None, None, str(conf_dir()))
        for folder in self.folders:
            search_path.append("command-line", folder)
        return ConfigRepository(search_path)

    def loader(self) -> ConfigLoaderImpl:
        """Hydra's config loader over :meth:`repository`'s search path, as the run will have it."""
        search_path = hydra_utils.create_automatic_config_search_path(None, None, str(conf_dir()))
        if self.args.config_dir:
            search_path.prepend("command-line", f"file://{os.path.abspath(self.args.config_dir)}",
                                anchor=SearchPathQuery(provider="schema"))  # where Hydra puts it
        return ConfigLoaderImpl(config_search_path=search_path)

    def _override_lists(self) -> list[list[str]]:
        """The overrides of each composition the command makes: one; in a sweep, one more for each choice of a
        swept config group (the choices of other swept keys select no config file)."""
        fixed = [o.input_line for o in self.overrides if not o.is_sweep_override()]
        if not self.args.multirun:
            return [list(self.args.overrides)]
        return [fixed, *([*fixed, f"{'++' if o.is_force_add() else '+' if o.is_add() else ''}{o.key_or_group}={value}"]
                         for o in self.overrides if o.is_sweep_override() and not o.is_hydra_override()
                         for value in _values(o))]

    def group_options(self, group: str) -> list[str]:
        """The options of config group ``group``."""
        return sorted(self.repository().get_group_options(group, ObjectType.CONFIG))

    def check_group_sweeps(self) -> None:
        """Refuse ``-m`` over options of a group that set the sweep itself (``experiment=glob(*)``: activations and
        enc_sizes declare ``hydra.sweeper.params``). Hydra expands a sweep once, from the config before any job
        exists, so each such option would run as one job of the default config: the command for each is named."""
        if not self.args.multirun:
            return
        for override in (o for o in self.overrides if o.is_sweep_override() and not o.is_delete()):
            group = override.key_or_group
            if not (options := self.group_options(group)):
                continue  # a key, not a group
            value = override.value()
            chosen = value.filter(options) if isinstance(value, Glob) else [str(v) for v in _values(override)]
            sweeps = [name for name in chosen if name in options and _sets_the_sweep(self.repository(), group, name)]
            if sweeps:
                one = len(sweeps) == 1
                raise ConfigError(group, f"{' and '.join(sweeps)} declare{'s' if one else ''} a sweep of "
                                  f"{'its' if one else 'their'} own (hydra.sweeper): in a sweep over {group} options "
                                  f"{'it' if one else 'each'} would run as one job, not as {'its' if one else 'a'} "
                                  "sweep", hint=self._one_sweep_each(override, sweeps, chosen))

    def _one_sweep_each(self, override: Override, sweeps: list[str], chosen: list[str]) -> str:
        flags = [a for a in self.argv if a not in self.args.overrides and a not in ("-m", "--multirun")]
        others = [a for a in self.args.overrides if a != override.input_line]

        def command(choice: str) -> str:  # the flags before the overrides, as Hydra's parser takes them
            words = [*flags, f"{override.key_or_group}={choice}", *others]
            return " ".join(["python -m modelforge", self.command, "-m", *map(shlex.quote, words)])

        lines = [f"run {'it' if len(sweeps) == 1 else 'each'} as a sweep of its own:",
                 *(f"    {command(name)}" for name in sweeps)]
        if together := [name for name in chosen if name not in sweeps]:
            lines.append(f"  and the others together: {command(','.join(together))}")
        return "\n".join(lines)

    def prepare(self) -> None:
        """Refuse what Hydra would answer with a traceback (two modes, a config source it lacks); bound the YAML in
        the user's folders; store ``model=FILE.yaml`` in Hydra's ConfigStore as typed."""
        args = self.args
        modes = [flag for flag, given in (("--run", args.run), ("--multirun", args.multirun), ("--cfg", args.cfg),
                                          ("--info", args.info is not None), ("--shell-completion",
                                                                              args.shell_completion)) if given]
        if len(modes) > 1:
            raise ConfigError(modes[-1], f"{' and '.join(modes)} cannot be given together: one at a time",
                              hint="--cfg job shows the config of a single run: leave out -m" if args.cfg else None)
        for folder in self.folders:
            if (scheme := folder.partition("://")[0] if "://" in folder else "file") not in CONFIG_SOURCES:
                raise ConfigError("hydra.searchpath", f"{folder!r}: Hydra reads no config source {scheme}://",
                                  allowed=[f"{s}://" for s in CONFIG_SOURCES], hint="a folder: file:///abs/path")
        for override in self.overrides:  # conditions.KEY.OTHER=VALUE: two levels, each a name without dots
            key = override.key_or_group
            if override.is_delete() or key not in (SEARCH_SPACE, CONDITIONS) and not key.startswith(f"{CONDITIONS}."):
                continue
            value = (_values(override) or [None])[0]
            rest = "" if key == SEARCH_SPACE else key.removeprefix(CONDITIONS).strip(".")  # KEY or KEY.OTHER
            levels = rest.count(".") + 1 if rest else 0
            if _dotted_keys(value) or levels > 2 or levels == 2 and isinstance(value, dict):
                raise ConfigError(key, "OmegaConf would split the dotted names of a search's keys into nested keys "
                                  "as it merges the command line", hint=(
                                      "with -m, write each searched key as a sweep of itself: "
                                      "'model.nodes.c3.block=choice(c2f,yolo_bottleneck)'" if key == SEARCH_SPACE else
                                      "write hydra.sweeper.conditions in a search config, as "
                                      "conf/hparams_search/architecture.yaml does (yours: --config-dir DIR)"))
        if len(given := [a for a in self.argv if _names_config_dir(a)]) > 1:
            raise ConfigError("--config-dir", f"given {len(given)} times: Hydra reads one --config-dir (the last) "
                              "and would drop the others without a word",
                              hint="give one --config-dir and add the others as hydra.searchpath=[file:///abs/path]")
        user_folders = [f.removeprefix("file://") for f in self.folders if f.startswith("file://")]
        for folder in user_folders:
            for path in user_yaml_files(folder):  # Hydra parses what a run selects: bombs never reach it
                bound_yaml_file(path)
        if user_folders:
            check_not_shadowed(user_folders, selected_configs(self.loader(), self.config_name, self._override_lists(),
                                                              bool(self.args.multirun)))
        self._refuse_model_options()
        for value in (v for o in self.overrides if o.key_or_group == "model" and not o.is_delete() for v in _values(o)):
            if isinstance(value, str) and value.endswith((".yaml", ".yml")):
                if not (path := Path(value).expanduser()).is_file():
                    raise ConfigError("model", f"no model file {value!r} (looked for {path.resolve()})",
                                      hint="name a model option (model=cnn) or a YAML file (model=configs/my.yaml)")
                if not isinstance(node := load_yaml_file(path), DictConfig):  # bounded, as above
                    raise ConfigError("model", f"{path} must hold a mapping (name: ...), not a {type(node).__name__}")
                *group, name = ["model", *filter(None, value.split("/"))]  # Hydra looks up "model/<value>"
                ConfigStore.instance().store(name=name, node=node, group="/".join(group), package="model")
                self.stored.append(("/".join(group), name))

    def forget_stored(self) -> None:
        """Take the model files this command stored out of the process-wide ConfigStore: a later command in the same
        process (a notebook, a test) lists and composes only its own."""
        for group, name in self.stored:
            node = ConfigStore.instance().repo
            for part in group.split("/"):
                node = node.get(part, {})
            node.pop(name if name.endswith(".yaml") else f"{name}.yaml", None)  # as ConfigStore.store names it
        self.stored.clear()


    def _refuse_model_options(self) -> None:
        """``eval``, ``export`` and ``predict`` rebuild the model stored in the checkpoint: a model option, chosen
        (``model=mlp``), added (``+model=mlp``) or set (``model.dropout=0``), would be ignored; it is refused."""
        if self.command not in CHECKPOINT_COMMANDS:
            return
        for override in self.overrides:
            key = override.key_or_group
            if key == "model" or key.startswith("model."):
                raise ConfigError(key, f"`{self.command}` rebuilds the model stored in the checkpoint (ckpt_path): it "
                                  "takes no model options", hint=f"another model: train it (python -m modelforge "
                                  f"train {override.input_line.lstrip('+~')} ...), then {self.command} its checkpoint")


# The commands whose model is the one stored in their ckpt_path.
CHECKPOINT_COMMANDS = ("eval", "export", "predict")


def _sets_the_sweep(repository: ConfigRepository, group: str, option: str) -> bool:
    """Whether option ``option`` of ``group`` holds ``hydra.sweeper`` settings (a search space, a sweeper)."""
    try:
        loaded = repository.load_config(f"{group}/{option}")
    except Exception:  # noqa: BLE001 - an option Hydra cannot load: Hydra reports it when it composes
        return False
    config = loaded.config if loaded is not None else None
    return isinstance(config, DictConfig) and OmegaConf.select(config, "hydra.sweeper") is not None


CONFIG_SOURCES = ("file", "pkg", "structured")  # the schemes of Hydra's config sources


def _values(override: Override) -> list[Any]:
    """The values an override gives: a list's items, a sweep's choices."""
    try:
        value = list(override.sweep_string_iterator()) if override.is_sweep_override() else override.value()
    except Exception:  # noqa: BLE001 - glob() and interval() sweeps list nothing
        return []
    return value if isinstance(value, list) else [value]


def _names_config_dir(arg: str) -> bool:
    """Whether a command-line word is Hydra's ``--config-dir`` flag (``-cd``, ``--config-dir=DIR``, a prefix
    argparse takes for it)."""
    flag = arg.partition("=")[0]
    return flag == "-cd" or len(flag) >= len("--config-d") and "--config-dir".startswith(flag)


def _dotted_keys(value: Any) -> bool:
    return isinstance(value, dict) and any("." in str(k) or _dotted_keys(v) for k, v in value.items())


def config_error(exc: BaseException, cmd: CommandLine) -> ModelforgeError | None:
    """The one-message error for ``exc``, or None when it is not a config problem."""
    if isinstance(exc, ModelforgeError):
        return exc
    if isinstance(exc, yaml.YAMLError):  # a config file Hydra read: !!python/object tags are refused by its loader
        return yaml_file_error(exc)
    if isinstance(exc, RecursionError):  # Hydra's answer to a config file whose defaults list includes itself
        return defaults_cycle_error(config_folders(cmd.folders))
    reported = (hydra_errors.CompactHydraException, omegaconf_errors.OmegaConfBaseException)
    if isinstance(exc, (hydra_errors.InstantiationException, SweepJobError)) or not isinstance(exc, reported):
        return None
    if isinstance(exc, hydra_errors.MissingConfigException) and "/" in (exc.missing_cfg_file or ""):
        group, _, option = exc.missing_cfg_file.removesuffix(".yaml").rpartition("/")
        folders = [f.removeprefix("file://") for f in cmd.folders if f.startswith("file://")]
        if unread := unread_file_error(folders, f"{group}/{option}"):
            return unread
        return UnknownNameError(f"{group} option", option, exc.options or cmd.group_options(group), path=group)
    if isinstance(exc, hydra_errors.OverrideParseException):
        return _unparsed_override(exc.override, exc.message)
    composing = isinstance(exc, hydra_errors.ConfigCompositionException)
    cause = exc.__cause__ if composing else exc
    missing_key = (omegaconf_errors.ConfigKeyError, omegaconf_errors.ConfigAttributeError)
    if composing and isinstance(cause, missing_key) and cause.parent_node is not None:
        return _unknown_key(cause, cmd)
    if isinstance(cause, omegaconf_errors.OmegaConfBaseException) and cause.full_key:
        return omegaconf_error(cause)
    if composing and cause is None and (error := _refused_override(str(exc), cmd)):
        return error
    return ConfigError("--config-dir" if isinstance(exc, hydra_errors.SearchPathException) else "",
                       str(exc).split("\nConfig search path")[0].strip() or type(exc).__name__)


def _unparsed_override(override: str, message: str) -> ConfigError:
    """An override Hydra's grammar refuses; a value with a character the grammar takes only quoted (non-ASCII:
    a path named in another script) is named, with the quoting for that very value."""
    key, equals, value = override.partition("=")
    odd = next((c for c in value if not c.isascii()), None) if equals else None
    if odd is None or value[:1] in ("'", '"'):
        return ConfigError(override, message.split("\n")[0], hint="quote it: 'key=[1,2]'; grammar: "
                           "https://hydra.cc/docs/advanced/override_grammar/basic/")
    quoted = f'{key}="{value}"' if "'" in value else f"{key}='{value}'"
    shell = f'"{quoted}"' if not any(c in quoted for c in '"$`\\') else shlex.quote(quoted)
    return ConfigError(key.lstrip("+~"), f"{odd!r} (U+{ord(odd):04X}) in {value!r}: Hydra's override grammar takes "
                       "characters other than ASCII only in a quoted value",
                       hint=f"quote the value (and the whole override, for the shell): {shell}")


def _refused_override(message: str, cmd: CommandLine) -> ConfigError | None:
    """Refusals Hydra 1.3 words only: a sweep of ``hydra.*``, a group override its defaults list refuses."""
    for override in cmd.overrides:
        group = override.key_or_group
        if override.is_hydra_override() and override.is_sweep_override():
            return ConfigError(group, "Hydra's own config (hydra.*) cannot be swept", hint=_search_space_hint(override))
        named = f"'{group}'" in message or f" {group}." in message  # as Hydra 1.3 words it
        if not named or override.is_delete() or not (options := cmd.group_options(group)):
            continue
        if unknown := [str(v) for v in _values(override) if str(v) not in options]:
            return UnknownNameError(f"{group} option", unknown[0], options, path=group)
        if override.is_add():
            return ConfigError(group, f"the {cmd.config_name} config already picks a {group} option",
                               hint=f"write {group}=OPTION to choose another; +{group}=... adds a group it lacks")
        return ConfigError(group, f"the {cmd.config_name} config has no {group} group in its defaults",
                           hint=f"+{group}={override.get_value_string()} adds it")
    return None


def _unknown_key(cause: omegaconf_errors.OmegaConfBaseException, cmd: CommandLine) -> ConfigError:
    """An override of a key the composed config lacks, as omegaconf_error words it (less Hydra's own), with a hint."""
    error, node = omegaconf_error(cause), cause.parent_node
    missing = error.path
    parent, _, key = missing.rpartition(".")
    keys = [k for k in error.allowed if parent or k != "hydra"]
    typed = next((o for o in cmd.overrides if f"{o.key_or_group}.".startswith(f"{missing}.")), None)
    full = typed.key_or_group if typed else missing
    after = full[len(missing) + 1:].partition(".")[0]
    if parent == SEARCH_SPACE and typed:
        hint = _search_space_hint(typed)
    elif not parent and after and after in cmd.group_options(key):
        hint = f"{key} is a config group: select the option first, e.g. {key}=[{after}]"
    elif parent and key in cmd.group_options(parent.replace(".", "/")):
        hint = f"'{key}' is an option of the {parent} group: select it first, e.g. {parent}=[{key}]"
    elif parent == "model" and (line := missing_defaults_hint(next(
            (o.get_value_string() for o in cmd.overrides if o.key_or_group == "model"), None), config_folders(cmd.folders))):
        hint = line  # a model file without its /model_defaults/... line
    else:  # a structured config (as Hydra's own) takes no new key; the top level (TrainConfig) does
        adds = not parent or OmegaConf.get_type(node) is dict
        hint = f"to add a key that is not in the config, write +{full}=..." if adds else None
    return errors.UnknownKeyError(missing, key, error.problem, keys, none=None, hint=hint)


def _search_space_hint(typed: Override) -> str | None:  # for hydra.sweeper.params.KEY=...
    entry, value = typed.key_or_group.partition(f"{SEARCH_SPACE}.")[2], typed.get_value_string().strip("'\"")
    return f"a search-space entry is a sweep of the key itself, with -m: '{entry}={value}'" if entry else None

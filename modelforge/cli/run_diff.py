"""``python -m modelforge diff RUN_A RUN_B``: what differs between two runs (run directories, sweep jobs or
checkpoint files): the resolved config key by key with the override that set each value, the seed, the data files
read, the software, and the final metrics side by side. Exit 0 for the same experiment (config, seed and data
alike), 1 when they differ, 2 for bad input."""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

import yaml

from modelforge.errors import ConfigError

EXIT_SAME, EXIT_DIFFERENT = 0, 1
# Where a run was resumed from, not what it learnt: shown, never what makes two experiments differ.
NOT_THE_EXPERIMENT = ("ckpt_path",)
# Records of where and how long, not of what was learnt: left out of the metrics table.
_NOT_METRICS = {"run_dir", "config", "best_ckpt", "learning_curves", "timings", "overrides", "launched_from",
                "data", "data_files", "environment", "device", "resume_with", "error", "stage", "confusion_matrix"}


@dataclass
class RunRecord:
    """What one run left: its config, the overrides it was started with, and its metrics.json (may be empty)."""

    label: str
    config: dict[str, Any]
    overrides: list[str] = field(default_factory=list)
    metrics: dict[str, Any] = field(default_factory=dict)


def read_run(path: str | Path) -> RunRecord:
    """The record of a run directory (or sweep job), or of a checkpoint (its stored config, and the records of the
    run directory it lies in); ConfigError for anything else."""
    given = Path(path).expanduser()
    if given.is_file():
        from modelforge.deploy.load import load_checkpoint

        config = load_checkpoint(given, key="diff")["hyper_parameters"]["config"]
        run_dir = given.parent.parent if given.parent.name == "checkpoints" else given.parent
        metrics, overrides = _metrics(run_dir), _overrides(run_dir)
        return RunRecord(str(path), dict(config), overrides, metrics)
    if not given.is_dir():
        raise ConfigError("diff", f"{path}: no such run directory or checkpoint file")
    for name in ("config.yaml", ".hydra/config.yaml"):  # the resolved config train wrote; else Hydra's composition
        if (given / name).is_file():
            config = yaml.safe_load((given / name).read_text()) or {}
            break
    else:
        raise ConfigError("diff", f"{path} holds no run: no config.yaml (a run directory, a sweep job such as "
                                  "SWEEP/0, or a checkpoint file)")
    return RunRecord(str(path), config, _overrides(given), _metrics(given))


def _metrics(run_dir: Path) -> dict[str, Any]:
    try:
        metrics = json.loads((run_dir / "metrics.json").read_text())
    except (OSError, ValueError):
        return {}
    return metrics if isinstance(metrics, dict) else {}


def _overrides(run_dir: Path) -> list[str]:
    try:
        return [str(o) for o in yaml.safe_load((run_dir / ".hydra" / "overrides.yaml").read_text()) or []]
    except (OSError, yaml.YAMLError):
        return [str(o) for o in _metrics(run_dir).get("overrides") or []]


def flatten(tree: Any, prefix: str = "") -> dict[str, Any]:
    """Nested mappings as dotted keys (``optim.lr``); lists and other values stay whole."""
    if isinstance(tree, Mapping) and tree:
        return {k: v for key, value in tree.items() for k, v in flatten(value, f"{prefix}{key}.").items()}
    return {prefix.rstrip("."): tree}


def cause(key: str, overrides: Sequence[str]) -> str | None:
    """The override that set ``key``: the same key, or the group or parent key above it (``model=mlp``)."""
    best = None
    for override in overrides:
        name = override.split("=", 1)[0].lstrip("+~")
        if key == name or key.startswith(f"{name}."):
            if best is None or len(name) >= len(best.split("=", 1)[0].lstrip("+~")):
                best = override
    return best


def _shown(value: Any) -> str:
    if value is None:
        return "(unset)"
    if isinstance(value, float):
        return f"{value:.6g}"
    return json.dumps(value) if isinstance(value, (list, dict)) else str(value)


def _table(rows: Iterable[Sequence[str]], indent: str = "  ") -> list[str]:
    rows = [list(r) for r in rows]
    if not rows:
        return []
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return [indent + "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]


def compare(a: RunRecord, b: RunRecord) -> tuple[list[str], bool]:
    """The lines that say how ``a`` and ``b`` differ, and whether they are the same experiment."""
    lines = [f"A: {a.label}", f"B: {b.label}"]
    flat_a, flat_b = flatten(a.config), flatten(b.config)
    keys = sorted(k for k in set(flat_a) | set(flat_b) if flat_a.get(k) != flat_b.get(k))
    experiment_keys = [k for k in keys if k not in NOT_THE_EXPERIMENT and k != "seed"]
    if keys:
        lines.append(f"config: {len(keys)} key(s) differ")
        rows = [["key", "A", "B", "set by (A | B)"]]
        for key in keys:
            causes = [cause(key, a.overrides), cause(key, b.overrides)]
            by = " | ".join(c or "(default)" for c in causes) if any(causes) else "(defaults)"
            rows.append([key, _shown(flat_a.get(key)), _shown(flat_b.get(key)),
                         "(where a run resumed from: not the experiment)" if key in NOT_THE_EXPERIMENT else by])
        lines += _table(rows)
    else:
        lines.append("config: the same")
    seed_a, seed_b = a.config.get("seed"), b.config.get("seed")
    lines.append(f"seed: {_shown(seed_a)}" if seed_a == seed_b else f"seed: {_shown(seed_a)} | {_shown(seed_b)}")
    data_a, data_b = a.metrics.get("data_files"), b.metrics.get("data_files")
    data_differ = bool(data_a and data_b and data_a.get("sha256") != data_b.get("sha256"))
    lines.append(_data_line(data_a, data_b, data_differ))
    lines += _environment_lines(a.metrics.get("environment"), b.metrics.get("environment"),
                                a.metrics.get("device"), b.metrics.get("device"))
    lines += _metric_lines(a.metrics, b.metrics)
    same = not experiment_keys and seed_a == seed_b and not data_differ
    why = ", ".join([*(["config"] if experiment_keys else []), *(["seed"] if seed_a != seed_b else []),
                     *(["data"] if data_differ else [])])
    lines.append("the same experiment" if same else f"different experiments: {why} {'differ' if ', ' in why else 'differs'}")
    return lines, same


def _data_line(a: dict | None, b: dict | None, differ: bool) -> str:
    if not a or not b:
        return "data: not recorded for " + ("both runs" if not a and not b else "A" if not a else "B")
    about = lambda d: f"{d['files']} files in {d['folder']}, sha256 {d['sha256'][:12]}"  # noqa: E731
    return f"data: {about(a)} | {about(b)}" if differ else f"data: the same ({about(a)})"


def _environment_lines(a: dict | None, b: dict | None, device_a: dict | None, device_b: dict | None) -> list[str]:
    env_a = {**(a or {}), **{f"device.{k}": v for k, v in (device_a or {}).items()}}
    env_b = {**(b or {}), **{f"device.{k}": v for k, v in (device_b or {}).items()}}
    if not env_a and not env_b:
        return ["environment: not recorded"]
    differ = sorted(k for k in set(env_a) | set(env_b) if env_a.get(k) != env_b.get(k))
    if not differ:
        return ["environment: the same (" + ", ".join(f"{k} {v}" for k, v in env_a.items()) + ")"]
    return ["environment: differs", *_table([["", "A", "B"], *([k, _shown(env_a.get(k)), _shown(env_b.get(k))]
                                                               for k in differ)])]


def _metric_lines(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    def numbers(m: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in m.items() if k not in _NOT_METRICS and (isinstance(v, (int, float, str)))}

    num_a, num_b = numbers(a), numbers(b)
    if not num_a and not num_b:
        return ["metrics: none recorded (no metrics.json)"]
    rows = [["metric", "A", "B", ""]]
    for key in sorted(set(num_a) | set(num_b)):
        va, vb = num_a.get(key), num_b.get(key)
        rows.append([key, _shown(va), _shown(vb), "" if _equal(va, vb) else "*"])
    return ["metrics (* differs):", *_table(rows)]


def _equal(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b


def _one_line_error(message: str) -> NoReturn:
    raise ConfigError("diff", f"{message} (python -m modelforge diff RUN_A RUN_B)")


def diff_main(argv: list[str]) -> int:
    """``diff RUN_A RUN_B``: print what differs; exit 0 for the same experiment, 1 when they differ."""
    parser = argparse.ArgumentParser(
        prog="python -m modelforge diff",
        description="Compare two runs: run directories, sweep jobs (SWEEP/0) or checkpoint files. Prints the "
                    "resolved config key by key with the override that set each value, the seed, the data files "
                    "read, the environment (Python, torch, Lightning, device, modelforge's commit) and the final "
                    "metrics side by side.",
        epilog="exit status: 0 when the runs are the same experiment (config, seed and data alike; the environment "
               "and metrics may still differ), 1 when they differ, 2 for bad input")
    parser.error = _one_line_error  # type: ignore[method-assign]
    parser.add_argument("run_a", help="a run directory, sweep job directory or checkpoint file")
    parser.add_argument("run_b", help="the run to compare it with")
    args = parser.parse_args(argv)
    lines, same = compare(read_run(args.run_a), read_run(args.run_b))
    print("\n".join(lines))
    return EXIT_SAME if same else EXIT_DIFFERENT

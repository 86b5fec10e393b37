"""Benchmark: one worker process vs two sharing one Optuna study in PostgreSQL: trials per minute.

The script starts a PostgreSQL server of its own (a data folder and a Unix socket in a temp dir, no TCP; run as
the ``postgres`` user when this runs as root, since the server refuses root) and creates a database in it. Then,
from a temp dir outside the checkout, on real MNIST (``$MODELFORGE_DATA``), the same search runs in two ways:

- ``one``: ONE ``python -m modelforge train -m hparams_search=optuna`` command, ``hydra.sweeper.n_trials=N``,
  study ``one``;
- ``two``: TWO such commands started together, ``n_trials=N/2`` each, study ``two``, each with its own
  ``hydra.sweeper.seed`` (the README says to give each worker its own; 0 and 1000 by default, as measured: before
  trial seeds were mixed, seeds closer than the number of trials drew the same points, see sweep_shared_study.md)
  and its own ``hydra.sweep.dir``.

Both sides run N trials in all. Each side's wall time runs from its launch to the exit of its last process; trials
per minute is N over that time. The study's own clock (the first trial's start to the last trial's end, without
the processes' start-up and final report) gives a second rate. Afterwards the study is read back from PostgreSQL
with Optuna and checked: trials by state, every trial number 0..N-1 once, no parameter set twice, and each
worker's job directories (``<trial>_<launch id>`` in its own sweep dir) exactly the trials whose ``run_dir`` the
study records there. The server is stopped (``--keep`` leaves it running and prints its URL and the command that
stops it) and a markdown table is printed. Nothing is written into the checkout (``--json FILE`` writes the raw
figures). Exit status 1 when a check failed.

    python experiments/benchmarks/sweep_shared_study.py                      # 8 trials a side, 20 training batches
    python experiments/benchmarks/sweep_shared_study.py --repeats 2 --threads 1   # OMP_NUM_THREADS=1 in each worker
    python experiments/benchmarks/sweep_shared_study.py --trials 12 --batches 100 --repeats 2
    python experiments/benchmarks/sweep_shared_study.py --keep               # leave the server up (optuna-dashboard)
"""

from __future__ import annotations

import argparse
import collections
import glob
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(HERE))
from results_md import current_commit  # a sibling file, not a package

DATABASE = "modelforge_bench"


# ---------------------------------------------------------------------------------------------------------------
# The PostgreSQL server


def _program(name: str) -> str:
    """A PostgreSQL server program: on PATH, or where Debian's ``postgresql`` package puts it (off PATH)."""
    found = shutil.which(name) or next(iter(sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), reverse=True)), None)
    if found is None:
        raise SystemExit(f"no {name} (a PostgreSQL server program): apt-get install postgresql")
    return found


@dataclass
class Server:
    root: Path
    as_owner: list[str]

    @property
    def data(self) -> Path:
        return self.root / "data"

    def url(self, database: str = DATABASE) -> str:
        """The SQLAlchemy URL of ``database`` (psycopg 3 driver, over the Unix socket in ``root``)."""
        return f"postgresql+psycopg://postgres@/{database}?host={self.root}"

    def pg_ctl(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run([*self.as_owner, _program("pg_ctl"), "-D", str(self.data), *args],
                              capture_output=True, text=True, timeout=120, check=False)

    def stop_command(self) -> str:
        return " ".join([*self.as_owner, _program("pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "stop"])

    def stop(self) -> None:
        self.pg_ctl("-m", "fast", "-w", "stop")
        shutil.rmtree(self.root, ignore_errors=True)


def start_server() -> Server:
    """initdb + pg_ctl start in a fresh temp dir (short: a socket path must fit in 107 bytes), then CREATE DATABASE."""
    import psycopg

    root = Path(tempfile.mkdtemp(prefix="mf_pg_"))
    as_owner: list[str] = []
    if os.geteuid() == 0:  # the server refuses to run as root
        shutil.chown(root, "postgres")
        as_owner = ["runuser", "-u", "postgres", "--"]
    server = Server(root, as_owner)
    made = subprocess.run([*as_owner, _program("initdb"), "-D", str(server.data), "-U", "postgres", "-A", "trust",
                           "--no-sync"], capture_output=True, text=True, timeout=120, check=False)
    if made.returncode != 0:
        shutil.rmtree(root, ignore_errors=True)
        raise SystemExit(f"initdb failed: {made.stderr[-2000:]}")
    started = server.pg_ctl("-l", str(root / "server.log"), "-w", "-t", "60", "-o",
                            f"-k {root} -c listen_addresses='' -c fsync=off", "start")
    if started.returncode != 0:
        log = (root / "server.log").read_text() if (root / "server.log").exists() else started.stderr
        shutil.rmtree(root, ignore_errors=True)
        raise SystemExit(f"the PostgreSQL server did not start: {log[-2000:]}")
    with psycopg.connect(host=str(root), user="postgres", dbname="postgres", autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {DATABASE}")
    return server


# ---------------------------------------------------------------------------------------------------------------
# The searches


def command(args: argparse.Namespace, url: str, study: str, n_trials: int, seed: int, sweep_dir: Path) -> list[str]:
    return [sys.executable, "-m", "modelforge", "train", "-m", "hparams_search=optuna",
            f"hydra.sweeper.storage='{url}'",  # quoted: the URL holds '=' and '?'
            f"hydra.sweeper.study_name={study}", f"hydra.sweeper.n_trials={n_trials}", f"hydra.sweeper.seed={seed}",
            "trainer.max_epochs=1", f"trainer.limit_train_batches={args.batches}",
            f"trainer.limit_val_batches={args.eval_batches}", f"trainer.limit_test_batches={args.eval_batches}",
            f"hydra.sweep.dir={sweep_dir}"]


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_side(args: argparse.Namespace, server: Server, side: str, study: str, workdir: Path) -> dict:
    """Start the side's worker(s) together, wait for all; then read the study back and check it."""
    n_workers = 1 if side == "one" else 2
    per_worker = args.trials // n_workers
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (str(REPO), os.environ.get("PYTHONPATH")))),
           "MODELFORGE_DATA": args.data, "HYDRA_FULL_ERROR": "0"}
    if args.threads:
        env["OMP_NUM_THREADS"] = str(args.threads)
    workers = {}
    load_before = os.getloadavg()
    cpu_before, start = _children_cpu(), time.perf_counter()
    for i in range(n_workers):
        name = f"worker_{'ab'[i]}" if n_workers == 2 else "worker"
        sweep_dir = workdir / study / name
        sweep_dir.parent.mkdir(parents=True, exist_ok=True)
        cmd = command(args, server.url(), study, per_worker, args.seeds[i], sweep_dir)
        log = (workdir / study / f"{name}.log").open("w")
        proc = subprocess.Popen(cmd, cwd=workdir, env=env, stdout=log, stderr=subprocess.STDOUT, text=True)
        workers[name] = {"proc": proc, "log": log, "sweep_dir": sweep_dir, "command": cmd}
    ends: dict[str, float] = {}
    while len(ends) < len(workers):
        for name, w in workers.items():
            if name not in ends and w["proc"].poll() is not None:
                ends[name] = time.perf_counter() - start
        time.sleep(0.1)
    seconds, cpu = time.perf_counter() - start, _children_cpu() - cpu_before
    load_after = os.getloadavg()
    for name, w in workers.items():
        w["log"].close()
        if w["proc"].returncode != 0:
            tail = (workdir / study / f"{name}.log").read_text()[-3000:]
            raise SystemExit(f"{side}/{name} failed ({w['proc'].returncode}): {' '.join(w['command'])}\n{tail}")
    result = {"side": side, "study": study, "workers": n_workers, "trials": per_worker * n_workers,
              "seconds": round(seconds, 1), "cpu_seconds": round(cpu, 1),
              "worker_seconds": {name: round(t, 1) for name, t in sorted(ends.items())},
              "trials_per_min": round(per_worker * n_workers / seconds * 60, 2),
              "load_before": [round(x, 2) for x in load_before], "load_after": [round(x, 2) for x in load_after],
              "commands": {name: _shown(w["command"]) for name, w in workers.items()}}
    result.update(check_study(server.url(), study, per_worker * n_workers,
                              {name: w["sweep_dir"] for name, w in workers.items()}))
    return result


def _shown(cmd: list[str]) -> str:
    """The command as a user types it: ``python``, the storage URL and the sweep dir as placeholders."""
    shown = " ".join(["python", *cmd[1:]])
    shown = re.sub(r"hydra\.sweeper\.storage='[^']*'", "hydra.sweeper.storage='URL'", shown)
    return re.sub(r"hydra\.sweep\.dir=\S+", "hydra.sweep.dir=DIR", shown)


def check_study(url: str, study_name: str, n_trials: int, sweep_dirs: dict[str, Path]) -> dict:
    """Read the study back from PostgreSQL: trials by state, the study's own clock, and the checks."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = optuna.storages.RDBStorage(url)
    try:
        trials = optuna.load_study(study_name=study_name, storage=storage).get_trials(deepcopy=False)
    finally:
        storage.remove_session()
        storage.engine.dispose()
    problems = []
    states = collections.Counter(t.state.name for t in trials)
    numbers = sorted(t.number for t in trials)
    if numbers != list(range(n_trials)):
        problems.append(f"trial numbers {numbers}, not 0..{n_trials - 1} once each")
    points = collections.Counter(json.dumps(t.params, sort_keys=True) for t in trials)
    twice = {p: n for p, n in points.items() if n > 1}
    if twice:
        dup = {p: sorted(t.number for t in trials if json.dumps(t.params, sort_keys=True) == p) for p in twice}
        problems.append(f"{sum(twice.values()) - len(twice)} parameter set(s) ran twice: "
                        + "; ".join(f"trials {v}: {p}" for p, v in dup.items()))
    if states.get("COMPLETE", 0) != n_trials:
        problems.append(f"states {dict(states)}, not {n_trials} COMPLETE")
    # Each worker's job directories (<trial>_<launch id>) are the trials the study says ran there.
    by_worker: dict[str, list[int]] = {}
    for name, sweep_dir in sweep_dirs.items():
        jobs = sorted(int(p.parent.name.split("_")[0]) for p in sweep_dir.glob("*/metrics.json"))
        recorded = sorted(t.number for t in trials if Path(t.user_attrs.get("run_dir", "/")).parent == sweep_dir)
        by_worker[name] = jobs
        if jobs != recorded:
            problems.append(f"{name}: job directories of trials {jobs}, the study records {recorded} there")
        if len(jobs) != n_trials // len(sweep_dirs):
            problems.append(f"{name}: {len(jobs)} job directories, not {n_trials // len(sweep_dirs)}")
    every = [n for jobs in by_worker.values() for n in jobs]
    if sorted(every) != list(range(n_trials)):
        problems.append(f"the workers' job directories hold trials {sorted(every)}")
    starts = [t.datetime_start for t in trials if t.datetime_start]
    ends = [t.datetime_complete for t in trials if t.datetime_complete]
    span = (max(ends) - min(starts)).total_seconds() if starts and ends else float("nan")
    durations = [(t.datetime_complete - t.datetime_start).total_seconds() for t in trials
                 if t.datetime_start and t.datetime_complete]
    # The sides draw different points (other seeds), and a trial's cost follows its enc_sizes: show the mix.
    mix = collections.Counter(str(t.params.get("enc_sizes")) for t in trials)
    return {"states": dict(states), "study_span_s": round(span, 1), "enc_sizes": dict(sorted(mix.items())),
            "study_trials_per_min": round(len(ends) / span * 60, 2) if span > 0 else None,
            "mean_trial_s": round(sum(durations) / len(durations), 1) if durations else None,
            "trials_by_worker": by_worker, "trial_seconds": {t.number: round(d, 1) for t, d in zip(
                [t for t in trials if t.datetime_start and t.datetime_complete], durations)},
            "best_value": max((t.value for t in trials if t.value is not None), default=None),
            "problems": problems}


# ---------------------------------------------------------------------------------------------------------------
# The report


def table(runs: list[dict]) -> list[str]:
    lines = [("| side | run | trials | wall time | trials / min | per worker | study clock (trials / min) "
              "| mean trial | enc_sizes drawn | CPU time | load 1-min before / after | trials by state | checks |"),
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in runs:
        per_worker = ", ".join(f"{n} {s:.0f} s: trials {r['trials_by_worker'][n]}"
                               for n, s in r["worker_seconds"].items())
        states = ", ".join(f"{k} {v}" for k, v in sorted(r["states"].items()))
        checks = "ok" if not r["problems"] else "; ".join(r["problems"])
        mix = " ".join(f"{k} x{v}" for k, v in r["enc_sizes"].items())
        lines.append(f"| {r['side']} ({r['workers']} worker{'s' if r['workers'] > 1 else ''}) | {r['repeat']} | "
                     f"{r['trials']} | {r['seconds']:.1f} s | **{r['trials_per_min']:.2f}** | {per_worker} | "
                     f"{r['study_span_s']:.1f} s ({r['study_trials_per_min']:.2f}) | {r['mean_trial_s']:.1f} s | "
                     f"{mix} | {r['cpu_seconds']:.0f} s | {r['load_before'][0]:.2f} / {r['load_after'][0]:.2f} | "
                     f"{states} | {checks} |")
    return lines


def summary(runs: list[dict]) -> list[str]:
    import statistics

    med = {side: statistics.median(r["trials_per_min"] for r in runs if r["side"] == side) for side in ("one", "two")}
    clock = {side: statistics.median(r["study_trials_per_min"] for r in runs if r["side"] == side)
             for side in ("one", "two")}
    return [(f"Two workers / one worker, trials per minute (medians): {med['two'] / med['one']:.2f}x over the "
             f"commands' wall time, {clock['two'] / clock['one']:.2f}x on the study's clock.")]


def _uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=8, help="trials a side (even: the two workers run half each)")
    parser.add_argument("--batches", type=int, default=20, help="trainer.limit_train_batches of each trial (1 epoch)")
    parser.add_argument("--eval-batches", type=int, default=5, help="trainer.limit_val_batches and limit_test_batches")
    parser.add_argument("--seeds", default="0,1000",
                        help="hydra.sweeper.seed of worker a and b (the one-worker side takes the first); see the .md "
                             "for why not 0,1")
    parser.add_argument("--repeats", type=int, default=1, help="runs of each side, alternated (one two two one ...)")
    parser.add_argument("--threads", type=int, default=0, help="OMP_NUM_THREADS for the workers (0: torch's default)")
    parser.add_argument("--keep", action="store_true", help="leave the PostgreSQL server (and its studies) running")
    parser.add_argument("--json", type=Path, help="write the raw figures to this file")
    parser.add_argument("--data", default=os.environ.get("MODELFORGE_DATA", str(REPO.parent / "shared/datasets/mnist")))
    args = parser.parse_args()
    if args.trials < 2 or args.trials % 2:
        parser.error("--trials must be even and at least 2")
    args.seeds = [int(s) for s in args.seeds.split(",")]
    if len(args.seeds) != 2:
        parser.error("--seeds takes two seeds: A,B")

    uptime_before, commit = _uptime(), current_commit()
    print(f"modelforge commit {commit}; uptime before: {uptime_before}", flush=True)
    started = time.perf_counter()
    server = start_server()
    runs: list[dict] = []
    try:
        with tempfile.TemporaryDirectory(prefix="mf_shared_study_") as workdir:
            for repeat in range(1, args.repeats + 1):
                for side in (("one", "two") if repeat % 2 else ("two", "one")):
                    study = side if repeat == 1 else f"{side}_{repeat}"
                    result = run_side(args, server, side, study, Path(workdir))
                    result["repeat"] = repeat
                    runs.append(result)
                    print(f"{side}: {result['seconds']:.1f} s, {result['trials_per_min']:.2f} trials/min, states "
                          f"{result['states']}, checks {result['problems'] or 'ok'}", flush=True)
    finally:
        if args.keep:
            print(f"\nthe server is still running: {server.url()}\n  studies: "
                  f"{', '.join(r['study'] for r in runs)}\n  stop it with: {server.stop_command()} && "
                  f"rm -rf {server.root}")
        else:
            server.stop()
    uptime_after = _uptime()
    print(f"uptime after: {uptime_after}")
    report = {"date": time.strftime("%Y-%m-%d %H:%M"), "commit": commit, "trials": args.trials, "batches": args.batches,
              "eval_batches": args.eval_batches, "seeds": args.seeds, "threads": args.threads or None,
              "seconds": round(time.perf_counter() - started), "uptime_before": uptime_before,
              "uptime_after": uptime_after, "runs": runs}
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    commands = [c for r in runs if r["repeat"] == 1 for c in r["commands"].values()]
    print("", *table(runs), "", *summary(runs), "", "```", *commands, "```", sep="\n")
    if any(r["problems"] for r in runs):
        sys.exit(1)


if __name__ == "__main__":
    main()

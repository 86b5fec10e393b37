"""Writes RESULTS.md from the sections' JSON files (``results/<section>.json``)."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import tempfile
from pathlib import Path

NOTE = {
    "quick": "**quick mode**: small settings (see the commands); a smoke check, not the figures to quote.",
    "full": "full settings.",
    "smoke": "**smoke mode**: one round of the smallest settings; checks the code runs, the figures mean nothing.",
}


def machine() -> list[str]:
    import pytorch_lightning
    import torch

    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor()) if Path("/proc/cpuinfo").exists() else ""
    return [f"- machine: {platform.node()}, {os.cpu_count()} CPUs ({cpu}), {platform.platform()}",
            f"- versions: Python {platform.python_version()}, torch {torch.__version__} "
            f"({torch.get_num_threads()} threads), pytorch-lightning {pytorch_lightning.__version__}; "
            f"rebuilt at modelforge commit {current_commit() or '?'} (sections measured since session 11 name the commit they ran on)",
            f"- GPU: {torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'none'}"]


def current_commit() -> str:
    """The short hash of HEAD, with ``-dirty`` when the working tree has changes ("" outside git)."""
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], capture_output=True, text=True, cwd=Path(__file__).parent).stdout.strip()

    commit = git("rev-parse", "--short", "HEAD")
    return f"{commit}-dirty" if commit and git("status", "--porcelain", "--untracked-files=no") else commit


def _fmt(s: dict, scale: float = 1.0, unit: str = "s") -> str:
    return f"{s['median'] * scale:.2f} {unit} (±{s['spread'] / 2:.0%}, n={s['n']})"


def _overhead(r: dict) -> list[str]:
    raw, mf = r["figures"]["raw PyTorch loop"], r["figures"]["modelforge train"]
    pairs = r.get("pair_ratios")  # recorded since session 11
    rows = ["| figure | raw PyTorch loop | modelforge train | ratio |", "|---|---:|---:|---:|"]
    for key, label in (("epoch_s", "per epoch (training + validation)"), ("fit_s", "fit (modelforge: train_time_s)"),
                       ("command_s", "whole command")):
        if pairs:
            ratio = f"**{pairs[key]['median']:.3f}x** ({pairs[key]['min']:.3f}-{pairs[key]['max']:.3f})"
        else:
            ratio = f"**{mf[key]['median'] / raw[key]['median']:.3f}x**"
        rows.append(f"| {label} | {_fmt(raw[key])} | {_fmt(mf[key])} | {ratio} |")
    rows.append(f"| test/acc | {raw['test_acc']['median']:.4f} | {mf['test_acc']['median']:.4f} | |")
    how = ("Ratio: the median over the interleaved pairs of modelforge / raw loop (in brackets: the lowest and "
           "highest pair), which a drift in the machine's speed between pairs does not bias; the ratio of the two "
           "medians would be.") if pairs else "Ratio: modelforge's median / the raw loop's median."
    return [*rows, "", how, "", *(f"- `{name}`: `{cmd}`" for name, cmd in r["commands"].items())]


def _loop(r: dict) -> list[str]:
    figs = r["figures"]
    raw = figs["raw PyTorch loop"]["median"]
    rows = ["| side | ms / step | added vs the raw loop | x 1,719 steps (one fast-recipe epoch) |",
            "|---|---:|---:|---:|"]
    for name, s in figs.items():
        added = s["median"] - raw
        rows.append(f"| {name} | {_fmt(s, 1e3, 'ms')} | {added * 1e3:+.2f} ms | {added * 1719:+.2f} s |")
    return [*rows, "", f"One linear layer (784 -> 10), batch 32, AdamW + OneCycle, {r['steps']} steps per side and "
            f"round, {r['rounds']} rounds alternated in one process; median step time per round, median over rounds "
            "(see bench_loop_overhead.py)."]


def _hooks(r: dict) -> list[str]:
    figs = r["figures"]
    base = figs["no plugins (baseline)"]["median"]
    rows = [f"| configuration | ms / step (batch {r['batch']}) | vs no plugins |", "|---|---:|---:|"]
    rows += [f"| {name} | {_fmt(s, 1e3, 'ms')} | {s['median'] / base:.3f}x |" for name, s in figs.items()]
    return [*rows, "", f"Forward + backward, {r['rounds']} interleaved rounds, {r['threads']} threads."]


def _hotpath(r: dict) -> list[str]:
    rows = [f"| per-step work (batch {r['batch']}) | time |", "|---|---:|"]
    rows += [f"| {name} | {_fmt(s, 1e6, 'us')} |" for name, s in r["figures"].items()]
    return rows


def _startup(r: dict) -> list[str]:
    figs, cpu = r["figures"], r.get("cpu")  # CPU seconds: recorded since the children keep their bytecode
    base = figs['python -c "import torch"']["median"]
    floor = figs['python -c "import torch, hydra.main, omegaconf"']["median"]
    cpu_base = cpu['python -c "import torch"']["median"] if cpu else 0.0
    head = "| command | wall time | vs `import torch` | vs `import torch, hydra.main, omegaconf` |"
    rows = [head + (" CPU time | CPU vs `import torch` |" if cpu else ""),
            "|---|---:|---:|---:|" + ("---:|---:|" if cpu else "")]
    for name, s in figs.items():
        row = f"| `{r['commands'][name]}` | {_fmt(s)} | {s['median'] / base:.2f}x | {s['median'] / floor:.2f}x |"
        if cpu:
            row += f" {_fmt(cpu[name])} | {cpu[name]['median'] / cpu_base:.2f}x |"
        rows.append(row)
    return [*rows, "", "`import torch, hydra.main, omegaconf` is what any Hydra app on torch imports before it can "
            "compose its config: the floor of a command that composes with Hydra."
            + (" CPU time is the child's user + system seconds; each command ran once first, not counted, writing "
               "its bytecode as a user's Python does." if cpu else "")]


def _dataread(r: dict) -> list[str]:
    rows = ["| MNIST's four files, read, checked and decoded in a process | time |", "|---|---:|"]
    rows += [f"| {name} | {_fmt(s, 1e3, 'ms')} |" for name, s in r["figures"].items()]
    return [*rows, "", f"`load_mnist` of `{r['data_dir']}`, interleaved, in one process with its in-memory "
            "copy cleared before each read (as a new run starts)."]


def _build(r: dict) -> list[str]:
    """build_model and create_model vs torchvision's constructor, per model and input size."""
    if "models" not in r or "sides" not in r:  # recorded before the build section compared with torchvision only
        return ["(recorded by an earlier version of the build section: run `run.py --only build` again)"]
    base, build, *creates = r["sides"]  # two create_model sides while compositions were kept, else one

    def ratio(m: dict, side: str) -> str:
        s = m["ratios"][side]
        return f"**{s['median']:.2f}x** ({s['min']:.2f}-{s['max']:.2f})"

    rows = [f"| model | input | params | {base} | {build} | vs constructor | "
            + "".join(f"{c} | vs constructor | " for c in creates) + "build 512 / 224 |",
            "|---|---:|---:|---:|---:|---:|" + "---:|---:|" * len(creates) + "---:|"]
    for key, m in r["models"].items():
        f = m["figures"]
        rows.append(f"| {m['name']} | {m['side']}x{m['side']} | {m['params']:,} | {_fmt(f[base])} | {_fmt(f[build])} | "
                    f"{ratio(m, build)} | " + "".join(f"{_fmt(f[c])} | {ratio(m, c)} | " for c in creates)
                    + f"{'%.2f' % m['vs_224'] if 'vs_224' in m else ''} |")
    how_create = ("timed twice: called again in the process, its composition reused "
                  "(a memo since removed), and as a first call, the kept compositions cleared first: "
                  "Hydra's compose, then the build, what a new process pays" if len(creates) == 2 else
                  "Hydra's compose, then the build")
    return [*rows, "", "`python experiments/benchmarks/run.py --only build`: each model built in one process, "
            f"{r['rounds']} interleaved rounds (bench_build.py): "
            "torchvision 0.28's constructor (`torchvision.models.NAME()`, its own init; ViT-B/16 at 512: "
            "`vit_b_16(image_size=512)`; MaxViT-T at 224 and 448, `maxvit_t(input_size=(S, S))`: its windows divide "
            "no 512 image's maps), `build_model` of the config that `create_model` composes (a fresh copy "
            "each round), and `create_model(NAME, ['in_channels=3', 'n_classes=1000', 'input_size=[S,S]'])`, "
            f"{how_create}. densenet121 is written in YAML for the benchmark "
            "(experiments/benchmarks/configs/model/densenet121.yaml). Every model is checked first: the same parameters "
            "as torchvision's, and at 224x224 the same outputs with torchvision's weights copied in. Ratios: the "
            "median over rounds of side / constructor (lowest-highest round in brackets); build 512 / 224 (maxvit_t: 448 / 224): the "
            f"medians of build_model at each size. {r['threads']} threads.{_calls_per_round(r)}"]


def _calls_per_round(r: dict) -> str:
    calls = {key: m["calls_per_round"] for key, m in r["models"].items() if "calls_per_round" in m}
    if not calls:
        return ""
    shown = ", ".join(f"{key.split()[0]} {n}" for key, n in calls.items() if key.endswith(" 224"))
    return (" Each round times every side the same number of calls in a row, as many as fit in about 0.4 s of the "
            f"constructor (per model: {shown}), and keeps the fastest (as `timeit` does).")


def _time_to_99(r: dict) -> list[str]:
    rows = ["| seed | test/acc | train_time_s | whole command |", "|---:|---:|---:|---:|"]
    rows += [f"| {x['seed']} | {x['test_acc']:.4f} | {x['train_time_s']:.1f} | {x['command_s']:.1f} |" for x in r["rows"]]
    acc, t = r["test_acc"], r["train_time_s"]
    return [*rows, "", f"`{r['command']}`: **{r['reached']} of {len(r['rows'])} seeds reach 99.0%**; test/acc median "
            f"{acc['median']:.4f} (min {acc['min']:.4f}, max {acc['max']:.4f}); training time median "
            f"{t['median']:.1f} s (min {t['min']:.1f}, max {t['max']:.1f})."]


def _gpu(r: dict) -> list[str]:
    """bench_gpu.py's session: every planned row in order, finished or not, with why."""
    rows = ["| row | status | result | train_time_s | whole command |", "|---|---|---|---:|---:|"]
    for x in r["rows"]:
        train = f"{x['train_time_s']:.2f} s" if x.get("train_time_s") else ""
        took = f"{x['command_s']:.1f} s" if "command_s" in x else ""
        rows.append(f"| {x['name']} | {x.get('status', x.get('exit'))} | {_gpu_result(x)} | {train} | {took} |")
    form = r.get("form", "gpu")
    lines = [f"Device: {r['device']} (`trainer.accelerator={r['accelerator']}`, {form}); deadline "
             f"{r.get('deadline_s', 0):.0f} s, session {r.get('status', '?')} after {r['seconds']:.0f} s.", "", *rows, ""]
    if r.get("ratios"):
        lines += ["| recipe | precision | side | train_time_s | raw loop | ratio to raw |", "|---|---|---|---:|---:|---:|",
                  *[f"| {q['recipe']} | {q['precision']} | {q['side']} | {q['train_time_s']:.2f} s | {q['raw_s']:.2f} s | "
                    f"{q['ratio_to_raw']:.3f}x |" for q in r["ratios"]], ""]
    if (run := r.get("speedrun")) and run.get("seeds"):
        lines += [f"`experiment=speedrun`: {run['reached_0.990']} of {run['seeds']} seeds reach 0.990; train_time_s "
                  f"{', '.join(f'{t:.2f}' for t in run['train_time_s'])}.", ""]
    for x in r["rows"]:
        if "timings" in x:
            lines.append(f"- {x['name']}: whole command {x['command_s']:.1f} s; the run's timings: "
                         + ", ".join(f"{k} {v}" for k, v in x["timings"].items())
                         + (f"; compile {x['compile']}" if "compile" in x else ""))
    lines += ["", "Commands:", "", *[f"- {x['name']}: `{x['command']}`" for x in r["rows"] if x.get("command")]]
    for x in r["rows"]:
        if x.get("status") in ("failed", "timeout", "interrupted") and x.get("error"):
            lines += ["", f"{x['name']} ({x['status']}, exit {x.get('exit')}):", "", "```", x["error"], "```"]
        if x.get("warnings"):
            lines += ["", f"{x['name']} printed warnings:", "", "```", *x["warnings"], "```"]
    return [*lines, *_host_syncs([x for x in r["rows"] if x.get("kind") == "syncs" and "syncs" in x])]


def _gpu_result(x: dict) -> str:
    """One row's figures in a few words."""
    if x.get("status") in ("pending", "running", "not run"):
        return x.get("why", "")
    if x.get("kind") == "pair" and "match" in x:
        return (f"{'match' if x['match'] else 'MISMATCH'}: steps {x['global_step']}, weights max diff "
                f"{x['weights_max_abs_diff']:.2e}, test/loss rel diff {x['test_loss_rel_diff']:.2e}")
    if x.get("kind") == "resume" and "steps" in x:
        return "; ".join(f"{s['run']}: global_step {s['global_step']}, Adam's steps {s['optimizer_steps']}"
                         for s in x["steps"])
    if x.get("kind") == "refusal":
        return " / ".join(x.get("refused", [])) or "not refused"
    if x.get("kind") == "tests":
        return x.get("summary", "")
    if "syncs" in x:
        return f"{x['syncs']} syncs in {x['steps_checked']} steps"
    if x.get("jobs"):
        return "; ".join(f"{j['overrides']}: {j['status']}" + (f", test/acc {float(j['test_acc']):.4f}"
                                                              if j.get("test_acc") else "") for j in x["jobs"])
    return f"test/acc {x['test_acc']:.4f}" if x.get("test_acc") is not None else ""


def _host_syncs(checks: list[dict]) -> list[str]:
    """gpu_host_syncs.py's counts: synchronizing CUDA operations in steady-state training steps."""
    if not checks:
        return []
    lines = ["", "| host syncs (torch.cuda.set_sync_debug_mode) | exit | steps checked | syncs |", "|---|---:|---:|---:|"]
    for x in checks:
        found = (str(x["steps_checked"]), str(x["syncs"])) if "syncs" in x else ("", x.get("skipped", "error"))
        lines.append(f"| {x['name']} | {x.get('exit')} | {found[0]} | {found[1]} |")
    for x in checks:
        lines += ["", f"- {x['name']}: `{x['command']}`"]
        for where in x.get("where", [])[:3]:
            lines += ["", f"  {where['count']} from:", "", "  ```", *["  " + s for s in where["stack"].splitlines()], "  ```"]
        if "error" in x:
            lines += ["", "  ```", *["  " + s for s in x["error"].splitlines()], "  ```"]
    return lines


def _segment(r: dict) -> list[str]:
    figs, pairs = r["figures"], r["pair_ratios"]
    rows = ["| side | seconds / epoch (training + validation) |", "|---|---:|"]
    rows += [f"| {name} | {_fmt(s)} |" for name, s in figs.items()]
    ratio = f"**{pairs['median']:.3f}x** ({pairs['min']:.3f}-{pairs['max']:.3f})"
    rows.append(f"| **ratio** modelforge / hand-written (per round; lowest-highest) | {ratio} |")
    return [*rows, "", f"`task=segment model=unet` (enc_sizes [8, 16, 32], batch 32, Adam + OneCycle), {r['train_batches']} "
            f"training and {r['val_batches']} validation batches an epoch, {r['rounds']} rounds alternated in one "
            "process after a warm-up round, who goes first alternating; the ratio is the median over rounds of each "
            "round's modelforge / hand-written epoch (see bench_segment.py). The machine's speed drifts between "
            "rounds when it is shared: compare the medians, and the spread beside them.", "",
            f"- `python experiments/benchmarks/run.py --only segment --train-batches {r['train_batches']} "
            f"--repeats {r['rounds']}`"]


TITLES = {"overhead": ("Framework overhead: modelforge vs a hand-written loop", _overhead),
          "loop": ("What the training loop adds per step", _loop),
          "hooks": ("Hook plugins: cost per training step", _hooks),
          "hotpath": ("Hot path: per-step work removed", _hotpath),
          "dataread": ("Reading the data set in a run", _dataread),
          "startup": ("Start-up", _startup),
          "build": ("Build time: the model language vs torchvision's constructors", _build),
          "segment": ("The segment task: modelforge vs a hand-written loop of the same U-Net", _segment),
          "time_to_99": ("Time to 99.0% test accuracy (fast recipe)", _time_to_99),
          "gpu": ("The GPU path", _gpu)}


def write_atomic(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` through a temp file beside it (fsync, rename): a kill leaves the old or the new
    file, never half of one."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o644)
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_results(results_dir: Path, target: Path) -> str:
    lines = ["# Benchmark results", "",
             "Written by `python experiments/benchmarks/run.py` (see its docstring and README.md here).",
             "Medians over interleaved repeats (A B A B); ± is half the spread (max - min) / median.", "",
             *machine(), ""]
    for name, (title, render) in TITLES.items():
        path = results_dir / f"{name}.json"
        if not path.exists():
            continue
        r = json.loads(path.read_text())
        note = f" Conditions: {r['note']}." if r.get("note") else ""
        commit = f" Commit {r['commit']}." if r.get("commit") else ""  # not recorded before session 11
        lines += [f"## {title}", "", f"{r['date']}, {NOTE[r['mode']]} Took {r['seconds']:.0f} s.{commit}{note}", "",
                  *render(r), ""]
    changes = target.parent / "CHANGES.md"  # hand-kept: each speed change with its before/after figure
    if changes.exists():
        lines += [changes.read_text().rstrip(), ""]
    write_atomic(target, "\n".join(lines))  # bench_gpu.py rewrites it after every row: a kill leaves the last one
    return "\n".join(lines)

"""``build_model`` of three zoo models at 224 and 512 in two source trees, processes alternated (A B A B).

    git worktree add --detach /tmp/before 9620148
    python experiments/benchmarks/before_after_build.py 3 /tmp/before .

Each process composes the configs, builds each once (warm), then times 3 builds and reports the median; the
table gives the median over rounds per tree. The figures of CHANGES.md's issue-39 rows.
"""
import json
import os
import statistics
import subprocess
import sys
CHILD = r'''
import copy, json, sys, time, gc
import modelforge
from modelforge.build import model_config_from_run
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from modelforge.config import conf_dir
out = {}
for name in ("resnet50", "mobilenet_v3_small", "vit_b_16"):
    for side in (224, 512):
        GlobalHydra.instance().clear()
        with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
            cfg = model_config_from_run(compose("summary", overrides=[f"model={name}", "model.in_channels=3", "model.n_classes=1000", f"model.input_size=[{side},{side}]"]))
        modelforge.build_model(copy.deepcopy(cfg))
        ts = []
        for _ in range(3):
            c = copy.deepcopy(cfg); gc.collect(); s = time.perf_counter(); modelforge.build_model(c); ts.append(time.perf_counter() - s)
        out[f"{name} {side}"] = sorted(ts)[1]
print(json.dumps(out))
'''
before, after = (sys.argv[2], sys.argv[3]) if len(sys.argv) > 3 else ("/tmp/before", ".")
trees = {"before": os.path.abspath(before), "after": os.path.abspath(after)}
values = {k: {} for k in trees}
for r in range(int(sys.argv[1]) if len(sys.argv) > 1 else 3):
    for label, tree in trees.items():
        env = {**os.environ, "PYTHONPATH": tree}
        res = subprocess.run([sys.executable, "-c", CHILD], env=env, cwd=tree, capture_output=True, text=True)
        if res.returncode: print(res.stderr[-2000:]); sys.exit(1)
        for k, v in json.loads(res.stdout.strip().splitlines()[-1]).items():
            values[label].setdefault(k, []).append(v)
        print(label, r, flush=True)
for k in values["after"]:
    b, a = statistics.median(values["before"][k]), statistics.median(values["after"][k])
    print(f"| {k} | {b:.2f} s | {a:.2f} s |")

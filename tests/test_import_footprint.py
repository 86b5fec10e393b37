"""What each layer of modelforge imports, seen in one fresh interpreter (imports are per process).

Model building, hooks, the data files, the summary and ``list`` must work without Lightning; hooks
without matplotlib; the summary of a modelforge model without torch._dynamo (FlopCounterMode
imports it, 1.5-2 s). One subprocess walks the layers in turn and reports, after each, which
of those packages are loaded: cumulative, so a layer's check also covers the layers before it.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

WALK = textwrap.dedent("""
    import json, sys
    WATCHED = ("pytorch_lightning", "lightning", "lightning_fabric", "matplotlib", "torch._dynamo", "modelforge.data")
    seen = {}
    LIGHT = ("modelforge.data", "modelforge.data.options")  # the package (lazy) and the options' defaults
    def note(stage):
        loaded = [m for m in sys.modules if m not in LIGHT]
        seen[stage] = sorted(w for w in WATCHED if any(m == w or m.startswith(w + ".") for m in loaded))
    import modelforge
    note("import modelforge")
    model = modelforge.build_model({"name": "cnn"})
    note("build_model")
    import modelforge.hooks
    note("import modelforge.hooks")
    import modelforge.inspect.flops, modelforge.inspect.summary
    note("import modelforge.inspect.flops, modelforge.inspect.summary")
    from modelforge.inspect.summary import summarize, describe_model
    summarize(model, model.input_shape)
    describe_model(model, model.input_shape)
    note("summary of a shipped model")
    import modelforge.data, modelforge.data.idx, modelforge.data.download
    note("import modelforge.data")
    from modelforge.cli.commands import list_names
    list_names([])
    note("list")
    print(json.dumps(seen))
""")


@pytest.mark.e2e
def test_each_layer_loads_only_what_it_needs() -> None:
    out = subprocess.run([sys.executable, "-c", WALK], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert out.returncode == 0, out.stderr[-3000:]
    loaded = json.loads(out.stdout.strip().splitlines()[-1])  # stage -> watched packages loaded by then
    assert loaded == {
        "import modelforge": [],  # nor the data layer (but its options' defaults): a model needs no data code
        "build_model": [],
        "import modelforge.hooks": [],  # no Lightning, no matplotlib (imported when a PNG is written)
        "import modelforge.inspect.flops, modelforge.inspect.summary": [],
        "summary of a shipped model": [],  # MACs from forward hooks: no torch._dynamo
        "import modelforge.data": ["modelforge.data"],  # the IDX files need no Lightning
        "list": ["modelforge.data"],  # every registry's names, the data modules' too, without Lightning
    }

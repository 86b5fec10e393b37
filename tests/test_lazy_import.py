"""``import modelforge`` registers the built-ins on first use, so that ``--help`` starts without torch or Hydra.

Each check runs in a fresh interpreter: what a process has imported, and when the built-ins register, are per
process.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from tests.conftest import REPO, child_env

HEAVY = ("torch", "hydra", "omegaconf")


def _run(code: str) -> dict:
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                         timeout=300, cwd=REPO, env=child_env())
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.e2e
def test_help_imports_neither_torch_nor_hydra() -> None:
    seen = _run(f"""
        import contextlib, io, json, runpy, sys
        sys.argv = ["modelforge", "--help"]
        with contextlib.redirect_stdout(io.StringIO()) as shown, contextlib.suppress(SystemExit):
            runpy.run_module("modelforge", run_name="__main__")
        print(json.dumps({{"heavy": [m for m in {HEAVY!r} if m in sys.modules],
                          "groups": "config groups" in shown.getvalue()}}))
    """)
    assert seen == {"heavy": [], "groups": True}


@pytest.mark.e2e
def test_builtins_register_on_first_use_and_before_a_users_names() -> None:
    seen = _run("""
        import json, sys
        import modelforge
        light = "torch" not in sys.modules
        import torch
        from modelforge.registry import ACTIVATIONS, MODELS
        ACTIVATIONS.add("relu", torch.nn.Tanh, force=True)  # forced over a built-in not yet registered
        print(json.dumps({"light": light, "relu": ACTIVATIONS.get("relu").__name__, "cnn": "cnn" in MODELS,
                          "public": modelforge.build_model({"name": "cnn"}).__class__.__name__}))
    """)
    assert seen == {"light": True, "relu": "Tanh", "cnn": True, "public": "CNN"}

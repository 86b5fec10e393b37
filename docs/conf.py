"""Sphinx configuration of modelforge's documentation (Markdown pages through MyST, the furo theme).

Serve it while editing:   sphinx-autobuild docs docs/_build/html
The strict build (CI):    python -m sphinx -W --keep-going -n -b html docs docs/_build/html
"""

from __future__ import annotations

import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
sys.path.insert(0, str(DOCS / "_ext"))  # the page directives of this site (model examples)

project = "modelforge"
author = "the modelforge authors"
copyright = "modelforge authors"  # noqa: A001 - Sphinx's own name for it

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",  # the docstrings' "Args:" sections (Google style)
    "modelforge_docs",
]

source_suffix = {".md": "markdown"}
root_doc = "index"
# README.md says how the site is built and why this generator: it is for the repository, not a page.
exclude_patterns = ["_build", "README.md", "figures/README.md"]
myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3  # [text](#a-heading) links, as on GitHub
highlight_language = "none"

html_theme = "furo"
html_title = "modelforge"
html_static_path: list[str] = []

autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_typehints_format = "short"
napoleon_google_docstring = True
napoleon_numpy_docstring = False

# -n (nitpicky) checks every cross-reference of these pages. Types of other projects (torch, omegaconf, Lightning,
# the standard library) would need their inventories over the network (intersphinx), which an offline build has
# not got: those are left as plain names; a reference to anything of modelforge's that does not exist still fails.
nitpick_ignore_regex = [
    (r"py:.*", r"(torch|omegaconf|pytorch_lightning|lightning|hydra|optuna|numpy|PIL|collections|typing|pathlib|"
               r"dataclasses|enum|abc|contextlib|types|os|io)(\..*)?"),
    (r"py:.*", r"(Any|Path|Tensor|DictConfig|ListConfig|Mapping|Sequence|Iterable|Iterator|Callable|T|nn\.Module|"
               r"Module|Generic|NamedTuple|Literal|TypeVar|None|Optional|Union)"),
    (r"py:class", r"(int|str|float|bool|dict|list|tuple|set|bytes|object|type|Exception|ValueError|KeyError)"),
    # type aliases and TypeVars of modelforge's signatures: names for a shape of data, not classes to link
    (r"py:class", r"modelforge\.registry\.T|Source"),
]

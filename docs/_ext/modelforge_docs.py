"""Directives of modelforge's documentation that run modelforge while the site is built, so a page cannot go stale.

``model-example``: a model file (YAML) shown as written, then the layer table that
``python -m modelforge summary model=FILE.yaml`` prints for it, computed from the file at build time. A file
that does not build fails the (strict) build with modelforge's own error.

``error-messages``: a table of every ``error:`` line the error pages show, with its exit status and its case.

``registry-names``: the names of one registry with their one-line descriptions, as ``python -m modelforge list``
prints them.
"""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path
from typing import Any

import yaml
from error_table import error_messages  # the table's rows: plain Python, which a test reads without Sphinx
from docutils import nodes
from docutils.parsers.rst import directives
from sphinx.application import Sphinx
from sphinx.util.docutils import SphinxDirective


def summary_of(text: str, depth: int = 2) -> str:
    """The summary table of the model file ``text``, down to ``depth`` (2: the graph's nodes, not their parts),
    with its total parameters. The text is the file: saved as it is and composed by Hydra, as
    ``summary model=FILE.yaml`` does, with nothing added (a reader copies what the page shows)."""
    import modelforge
    from modelforge.errors import ModelforgeError

    try:
        with tempfile.TemporaryDirectory() as folder:
            (Path(folder) / "model").mkdir()
            (Path(folder) / "model" / "example.yaml").write_text(text)
            model = modelforge.create_model("example", config_dir=folder, seed=0)
    except ModelforgeError as exc:
        raise ValueError(f"the example does not build as written: {exc}") from None
    rows = [row for row in modelforge.summarize(model, model.input_shape) if row.depth <= depth]
    table = modelforge.format_summary(model, rows, model.input_shape, expand=True)
    notes = ("Trainable", "Non-trainable", "Buffers", "Params +", "Total MACs", "Composite")
    return "\n".join(line for line in table.splitlines() if not line.startswith(notes))


class ModelExample(SphinxDirective):
    """A model file and its summary table."""

    has_content = True
    option_spec = {"depth": directives.positive_int, "caption": directives.unchanged}

    def run(self) -> list[nodes.Node]:
        text = "\n".join(self.content) + "\n"
        try:
            table = summary_of(text, depth=self.options.get("depth", 2))
        except Exception as exc:  # noqa: BLE001 - any failure is the page's error, reported where it is
            raise self.error(f"model-example: {exc}") from None
        source = nodes.literal_block(text, text, language="yaml")
        output = nodes.literal_block(table, table, language="none", classes=["summary-output"])
        caption = nodes.paragraph(text=self.options.get("caption", "python -m modelforge summary model=FILE.yaml:"))
        caption["classes"].append("summary-caption")
        return [source, caption, output]


class RegistryNames(SphinxDirective):
    """A table of one registry's names and descriptions."""

    required_arguments = 1

    def run(self) -> list[nodes.Node]:
        import modelforge

        registry = modelforge.REGISTRIES.get(self.arguments[0])
        if registry is None:
            raise self.error(f"registry-names: no registry {self.arguments[0]!r}")
        rows = [(name, registry.describe(name)) for name in registry.names()]
        return [_table(("name", "what it is"), rows)]


def registry_inline(name: str, rawtext: str, text: str, lineno: int, inliner: Any, options: Any = None,
                    content: Any = None) -> tuple[list[nodes.Node], list[nodes.system_message]]:
    """``{registry-inline}`blocks```: the registry's names, comma-separated, each as code."""
    import modelforge

    registry = modelforge.REGISTRIES.get(text)
    if registry is None:
        message = inliner.reporter.error(f"registry-inline: no registry {text!r}", line=lineno)
        return [inliner.problematic(rawtext, rawtext, message)], [message]
    parts: list[nodes.Node] = []
    for i, entry in enumerate(registry.names()):
        parts += [nodes.Text(", ")] if i else []
        parts.append(nodes.literal(entry, entry))
    return parts, []


class CompositeBlocks(SphinxDirective):
    """A table of the composite blocks that conf/blocks/*.yaml define: name(parameters), what, file."""

    def run(self) -> list[nodes.Node]:
        from modelforge.config import conf_dir

        rows = []
        for path in sorted((conf_dir() / "blocks").glob("*.yaml")):
            for name, spec in (yaml.safe_load(path.read_text()) or {}).items():
                if isinstance(spec, dict) and "nodes" in spec:
                    params = ", ".join(k if v == "???" else f"{k}={v}" for k, v in (spec.get("params") or {}).items())
                    rows.append((f"{name}({params})", spec.get("description", ""), f"blocks/{path.name}"))
        return [_table(("block(parameters)", "what it is", "file"), rows)]


class ErrorMessages(SphinxDirective):
    """A table of every message the error pages show: the message, its exit status, and a link to its case."""

    def run(self) -> list[nodes.Node]:
        table = _table(("message", "exit", "where"), [])
        body = table.next_node(nodes.tbody)
        for message, status, page, title, anchor in error_messages(Path(self.env.srcdir)):
            row = nodes.row()
            for cell in (nodes.literal(message, message), nodes.Text(status)):
                entry = nodes.entry()
                entry += nodes.paragraph("", "", cell)
                row += entry
            entry = nodes.entry()
            link = nodes.reference("", title, refuri=f"{page}.html#{anchor}", internal=True)
            entry += nodes.paragraph("", "", link)
            row += entry
            body += row
        return [table]


def _table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> nodes.table:
    table = nodes.table()
    group = nodes.tgroup(cols=len(header))
    table += group
    group.extend(nodes.colspec(colwidth=1) for _ in header)
    head = nodes.thead()
    group += head
    body = nodes.tbody()
    group += body
    for parent, cells in ((head, header), *((body, row) for row in rows)):
        row = nodes.row()
        for i, cell in enumerate(cells):
            entry = nodes.entry()
            entry += nodes.paragraph("", "", nodes.literal(cell, cell) if i == 0 else nodes.Text(cell))
            row += entry
        parent += row
    return table


_SOURCE_LINK = re.compile(r"\[([^\]]+)\]\(([\w./-]+\.(?:py|json|yaml))\)")


def link_source_files(app: Sphinx, relative_path: Path, parent_docname: str, content: list[str]) -> None:
    """A record of experiments/ included as a page links its scripts (`[raw_loop.py](raw_loop.py)`): those files
    are not pages, so each such link becomes a download of the file itself."""
    included = (Path(app.srcdir) / relative_path).resolve()

    def download(match: re.Match[str]) -> str:
        target = (included.parent / match.group(2)).resolve()
        if not target.is_file():
            return match.group(0)  # left for the strict build to report
        # "/...": relative to the source folder (MyST passes the including page's name without its folder)
        return f"{{download}}`{match.group(1)} </{os.path.relpath(target, app.srcdir)}>`"

    content[0] = _SOURCE_LINK.sub(download, content[0])


def setup(app: Sphinx) -> dict[str, Any]:
    app.connect("include-read", link_source_files)
    app.add_directive("model-example", ModelExample)
    app.add_directive("registry-names", RegistryNames)
    app.add_directive("composite-blocks", CompositeBlocks)
    app.add_directive("error-messages", ErrorMessages)
    app.add_role("registry-inline", registry_inline)
    return {"parallel_read_safe": True, "parallel_write_safe": True}

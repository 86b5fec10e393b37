"""``python -m modelforge summary model=...``: print the model a config builds."""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig

from modelforge.build import build_model, model_config_from_run
from modelforge.hooks import build_hook_plugins
from modelforge.inspect.summary import format_summary, summarize


def summary_task(cfg: DictConfig) -> None:
    """Build, attach any hook plugins, run one dummy batch and print the table (and draw the graph if asked)."""
    graph = (cfg.get("summary") or {}).get("graph")
    if graph:
        from modelforge.inspect.model_graph import check_picture_path

        check_picture_path(graph)  # before any work
    model_cfg = model_config_from_run(cfg)
    plugins = build_hook_plugins(cfg.get("hooks"), path="hooks")
    model = build_model(model_cfg, seed=cfg.seed)
    handles = [p.attach(model, run_dir=Path.cwd()) for p in plugins]
    try:
        rows = summarize(model, model.input_shape, batch_size=cfg.batch_size)
    finally:
        for handle in handles:
            handle.remove()
    print(model)
    print()
    print(format_summary(model, rows, model.input_shape, expand=bool((cfg.get("summary") or {}).get("expand"))))
    if graph:  # summary.graph=model.svg: a picture of the module graph, skips drawn as arcs
        from modelforge.inspect.model_graph import draw_model_graph

        print(f"module graph written to {draw_model_graph(model, model.input_shape, graph, title=model_cfg['name'])}")

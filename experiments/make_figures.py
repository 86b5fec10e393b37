"""Draw the documentation's pictures from real runs, so that no page shows a picture of code that has changed.

    MODELFORGE_DATA=/path/to/mnist python experiments/make_figures.py [--out docs/figures] [--keep] [--from-run RUN]

Runs, as real processes in a scratch folder (never the checkout):

1. ``train``: the main job, the default cnn for 3 epochs on real MNIST (about 80 s on a quiet 2-core CPU), which
   draws ``learning_curves.png``;
2. ``eval`` of its checkpoint with ``hooks=[feature_capture,grad_cam]``: ``confusion_matrix.png``, one test
   digit's feature maps and Grad-CAM heatmaps;
3. ``summary summary.graph=...`` of ``model=cnn`` and ``model=graph``: their module graphs.

``--from-run RUN`` skips step 1 and draws from a finished run of ``train`` instead. The pictures are
copied into ``--out`` under the fixed names of FIGURES, with ``run_overview.png`` (learning curves,
confusion matrix and module graph side by side, the README's picture) and ``figures.json``: the commands, the
commit and the run's figures (test/acc, the eval's right answers), which the captions may quote.
Exit status: 0 when every picture was drawn, 1 when a command failed (its last lines are printed), 2 for bad input.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# name in --out: (where the commands leave it, relative to the scratch folder; what it shows)
FIGURES = {
    "learning_curves.png": ("run/learning_curves.png", "the main job's learning curves (train: 3 epochs)"),
    "confusion_matrix.png": ("eval/confusion_matrix.png", "eval's confusion matrix of that run"),
    "feature_maps.png": ("eval/features/*.png", "feature_capture: one test digit's channels of encoder.0.act"),
    "grad_cam.png": ("eval/grad_cam/*.png", "grad_cam of encoder.1: what each prediction looked at"),
    "model_graph_cnn.png": ("model_graph_cnn.png", "summary.graph of model=cnn"),
    "model_graph_graph.png": ("model_graph_graph.png", "summary.graph of model=graph, skips as arcs"),
}
OVERVIEW = "run_overview.png"


def commands(work: Path, trained: bool = False) -> list[list[str]]:
    """The real commands, in order; paths inside ``work`` (``trained``: ``work/run`` holds the run already)."""
    mf = [sys.executable, "-m", "modelforge"]
    train = [[*mf, "train", "seed=0", f"hydra.run.dir={work / 'run'}"]]
    return [
        *([] if trained else train),
        [*mf, "eval", f"ckpt_path={work / 'run' / 'checkpoints' / 'last.ckpt'}", "hooks=[feature_capture,grad_cam]",
         "hooks.feature_capture.layers=[encoder.0.act]", "hooks.feature_capture.save_images=true",
         "hooks.feature_capture.max_images=1", "hooks.grad_cam.layer=encoder.1", "hooks.grad_cam.num_images=4",
         f"hydra.run.dir={work / 'eval'}"],
        [*mf, "summary", "model=cnn", f"summary.graph={work / 'model_graph_cnn.png'}"],
        [*mf, "summary", "model=graph", f"summary.graph={work / 'model_graph_graph.png'}"],
    ]


def run(argv: list[str], cwd: Path) -> None:
    print("$", " ".join(argv[1:] if argv[0] == sys.executable else argv), flush=True)
    done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True)
    if done.returncode != 0:
        tail = "\n".join((done.stderr.strip() or done.stdout.strip()).splitlines()[-8:])
        raise RuntimeError(f"exited {done.returncode}:\n{tail}")


def found(work: Path, pattern: str) -> Path:
    matches = sorted(work.glob(pattern))
    if not matches:
        raise RuntimeError(f"the commands left no {pattern}")
    return matches[0]


def draw_overview(curves: Path, matrix: Path, graph: Path, path: Path) -> None:
    """A run's three pictures on one white canvas: the learning curves across the top, the confusion matrix and the
    module graph under them, each at its own aspect ratio."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.image as mpimg
    import matplotlib.pyplot as plt

    top, left, right = (mpimg.imread(p) for p in (curves, matrix, graph))
    ratio = lambda image: image.shape[1] / image.shape[0]  # noqa: E731 - width over height
    width = 12.0
    bottom_height = width / (ratio(left) + ratio(right))
    fig = plt.figure(figsize=(width, width / ratio(top) + bottom_height))
    grid = fig.add_gridspec(2, 2, height_ratios=[width / ratio(top), bottom_height],
                            width_ratios=[ratio(left), ratio(right)])
    for spec, image in ((grid[0, :], top), (grid[1, 0], left), (grid[1, 1], right)):
        ax = fig.add_subplot(spec)
        ax.imshow(image)
        ax.axis("off")
    fig.subplots_adjust(left=0.01, right=0.99, top=0.99, bottom=0.01, wspace=0.02, hspace=0.04)
    fig.savefig(path, dpi=120, facecolor="white")
    plt.close(fig)


def commit() -> str:
    done = subprocess.run(["git", "describe", "--always", "--dirty"], cwd=REPO, capture_output=True, text=True)
    return done.stdout.strip() or "unknown"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "figures", help="where the pictures go")
    parser.add_argument("--keep", action="store_true", help="keep the scratch folder and print its path")
    parser.add_argument("--from-run", type=Path, help="a finished run of the main job (train): no training here")
    args = parser.parse_args()
    if not os.environ.get("MODELFORGE_DATA"):
        print("error: set MODELFORGE_DATA to a folder with real MNIST (the pictures are of a real run)",
              file=sys.stderr)
        return 2
    if args.from_run is not None and not (args.from_run / "checkpoints" / "last.ckpt").is_file():
        print(f"error: --from-run: {args.from_run} holds no checkpoints/last.ckpt", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="make_figures_"))
    try:
        if args.from_run is not None:
            shutil.copytree(args.from_run, work / "run")
        for argv in commands(work, trained=args.from_run is not None):
            run(argv, work)
        args.out.mkdir(parents=True, exist_ok=True)
        for name, (pattern, _) in FIGURES.items():
            shutil.copyfile(found(work, pattern), args.out / name)
        draw_overview(args.out / "learning_curves.png", args.out / "confusion_matrix.png",
                      args.out / "model_graph_cnn.png", args.out / OVERVIEW)
        metrics = json.loads((work / "run" / "metrics.json").read_text())
        evaluated = json.loads((work / "eval" / "eval_metrics.json").read_text())
        counts = evaluated.get("confusion_matrix") or []
        record = {
            "commit": commit(),
            "commands": [" ".join(["python", *argv[1:]]).replace(str(work), "WORK") for argv in commands(work)],
            "training": "given with --from-run" if args.from_run is not None else "the first command, here",
            "test/acc": metrics.get("test/acc"),
            "train_time_s": metrics.get("train_time_s"),
            "eval right": sum(counts[i][i] for i in range(len(counts))),
            "eval images": sum(map(sum, counts)),
            "figures": {name: what for name, (_, what) in FIGURES.items()} | {OVERVIEW: "learning curves, confusion "
                                                                                 "matrix and module graph"},
        }
        (args.out / "figures.json").write_text(json.dumps(record, indent=2) + "\n")
    except RuntimeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    finally:
        if args.keep:
            print(f"scratch folder kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    print(f"{len(FIGURES) + 1} pictures and figures.json written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

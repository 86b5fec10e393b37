"""`summary task=...`: the model at the sizes train builds it at for that task's data (the data module is made,
its samples not read), its output shown and checked as train checks it."""

from __future__ import annotations

import pytest

OUTPUT = {"segment": ("model=unet", "Task segment: output [B, 11, 56, 56]"),
          "reconstruct": ("model=autoencoder", "Task reconstruct: output [B, 1, 28, 28]"),
          "multilabel": ("model=cnn", "Task multilabel: output [B, 10]"),
          "regress": ("model=cnn", "Task regress: output [B, 1]")}


@pytest.mark.parametrize("task", list(OUTPUT))
def test_summary_of_each_task_shows_its_output(run_main, task: str) -> None:
    model, line = OUTPUT[task]
    result = run_main("summary", f"task={task}", model)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1].startswith(line)


def test_a_zoo_backbone_gets_its_segmentation_head(run_main) -> None:
    result = run_main("summary", "task=segment", "model=resnet18")
    assert result.returncode == 0, result.stderr
    assert "class_map" in result.stdout and result.stdout.splitlines()[-1].startswith(
        "Task segment: output [B, 11, 56, 56]")


def test_a_size_given_is_kept(run_main) -> None:
    result = run_main("summary", "task=segment", "model=unet", "model.input_size=[32,32]")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1].startswith("Task segment: output [B, 11, 32, 32]")


@pytest.mark.parametrize("model, node", [("cnn", "model"), ("vit_tiny", "model.nodes.head")])
def test_a_model_without_the_tasks_output_is_refused_as_train_refuses_it(run_main, model: str, node: str) -> None:
    result = run_main("summary", "task=segment", f"model={model}")
    assert result.returncode == 2
    first = result.stderr.strip().splitlines()[0]
    assert first.startswith(f"error: {node}: ") and "gives [B, 11], but task 'segment'" in first
    assert first.endswith(f"needs [B, 11, 56, 56]: model '{model}' has no head for it (no heads.class_map in its file)")

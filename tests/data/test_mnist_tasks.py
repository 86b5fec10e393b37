"""The sets derived from MNIST for the tasks beyond classification: the same samples for a seed, and targets that
say what the images show (a mask of the digits' ink, the digits present, their sum)."""

from __future__ import annotations

import torch

from modelforge.data.mnist_tasks import derive, digit_tiles

# Twenty "digits": each a filled square of ink whose side tells it apart, labelled 0..9 twice.
IMAGES = torch.zeros(20, 28, 28, dtype=torch.uint8)
for i in range(20):
    IMAGES[i, 4:6 + i % 10, 4:6 + i % 10] = 200
LABELS = torch.arange(20) % 10


def test_a_seed_gives_the_same_samples_and_another_seed_others() -> None:
    first, again, other = (derive("mnist_segment", IMAGES, LABELS, 8, seed, 0.0) for seed in (1, 1, 2))
    assert torch.equal(first[0], again[0]) and torch.equal(first[1], again[1])
    assert not torch.equal(first[0], other[0])


def test_a_segmentation_mask_marks_each_digits_ink_with_one_plus_its_label() -> None:
    canvas, mask = derive("mnist_segment", IMAGES, LABELS, 16, 0, 0.0)
    assert canvas.shape == mask.shape == (16, 56, 56)
    assert torch.equal(mask > 0, canvas >= 128)  # ink is the digits' pixels of at least half intensity
    assert set(mask.unique().tolist()) <= set(range(11)) and mask.max() > 0


def test_multilabel_targets_are_the_digits_present_and_the_sum_their_total() -> None:
    canvas, mask, digits = digit_tiles(IMAGES, LABELS, 6, 3)
    _, labels = derive("mnist_multilabel", IMAGES, LABELS, 6, 3, 0.0)
    _, sums = derive("mnist_sum", IMAGES, LABELS, 6, 3, 0.0)
    for i in range(6):
        present = set(digits[i].tolist())
        assert set(labels[i].nonzero().flatten().tolist()) == present
        assert present == {v - 1 for v in mask[i].unique().tolist() if v}  # every cell's digit is in the image
        assert sums[i].item() == digits[i].sum().item()


def test_a_noisy_digit_targets_its_clean_self() -> None:
    noisy, clean = derive("mnist_denoise", IMAGES, LABELS, 5, 0, 0.3)
    assert noisy.shape == clean.shape == (5, 28, 28) and not torch.equal(noisy, clean)
    assert all(any(torch.equal(c, image) for image in IMAGES) for c in clean)

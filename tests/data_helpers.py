from tests.helpers.mnist_idx import idx_bytes, pattern_images, write_idx, write_idx_set, write_mnist_idx  # noqa: F401  moved; kept for branches written before the move

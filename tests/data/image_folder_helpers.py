from tests.helpers.image_folder import write_image_folder  # noqa: F401  moved; kept for branches written before the move

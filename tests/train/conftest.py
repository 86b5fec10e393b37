"""The training tests' helpers moved to tests/helpers/run_config.py and their data to tests/conftest.py."""

from tests.helpers.run_config import TINY, compose_train, tiny_cli_args  # noqa: F401  moved; for branches written before

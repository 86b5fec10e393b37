from tests.helpers.signals import signal_and_wait, start_train, wait_for  # noqa: F401  moved; kept for branches written before the move

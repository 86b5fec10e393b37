"""Moved to tests/helpers/payloads.py; kept for branches written before the move, until they are merged."""

from tests.helpers.payloads import *  # noqa: F401,F403
from tests.helpers.payloads import _edit_program  # noqa: F401

"""Helpers shared by several test modules (a test module imports helpers from here, never from another
test module)."""

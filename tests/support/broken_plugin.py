"""A user module that fails while it runs (tests/train/test_plugins.py: a clear error, not a traceback)."""

FAILS = 1 / 0

"""Modules that import nothing of datapipe (only the standard library, and torch where a
batch is checked), so that a child in a venv of its own (FFCV's) runs them by their path."""

"""The output lock lives with the writer it guards (datapipe/format/output_lock.py); the
converters' input listing asks for its file name here."""

from datapipe.format.output_lock import LOCK_NAME, OutputLock

__all__ = ["LOCK_NAME", "OutputLock"]

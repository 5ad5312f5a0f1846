"""Spark producer: turn a DataFrame into queue messages, one per row, exactly once in effect.

``export(df, queue=..., channel_col=...)`` runs on the driver; the executors run the partition
writer, which uses plain psycopg and the same SQL function as ``enqueue_many``. Nothing here
imports Django (executors have no settings), and PySpark is imported only when ``export()``
runs. See docs/spark.md.
"""

from __future__ import annotations

from .export import ExportProgress, ExportResult, export
from .writer import Counts, ExportError, WriterConfig, write_rows

__all__ = ["Counts", "ExportError", "ExportProgress", "ExportResult", "WriterConfig", "export", "write_rows"]

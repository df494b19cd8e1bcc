"""Benchmarks of QueueMesh's hot paths, each measured against a floor in the same run.

One module per benchmark (``decode``, ``fleet``, ``worker``), each with a ``measure`` that
returns a plain report (and helpers of their own: ``fleet_watch``, ``worker_clients``,
``worker_stats``); the ``queuemesh bench`` command (stack/commands/bench.py) parses
arguments and prints the reports.
"""

from __future__ import annotations


class BenchError(Exception):
    """The measurement would not be of what the benchmark claims (its input no longer matches
    the code it times); the message says what differed."""

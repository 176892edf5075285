"""Autotuning that remembers: ``@kd.autotune`` (``tuned``), its configurations (``config``),
keys (``key``), safe timing (``measure``), the records kept in the disk cache (``records``) and
the ``tune_for=`` declarations ``kerneldsl tune`` runs ahead of time (``ahead``)."""

from __future__ import annotations

from .config import Config
from .measure import benchmark_launches
from .records import Timing
from .tuned import Autotuned, Choice, autotune

__all__ = ["Autotuned", "Choice", "Config", "Timing", "autotune", "benchmark_launches"]

"""Settings shared by every tier.

Hypothesis's per-example deadline (200 ms by default) and its too-slow health check are timed
assertions: on a loaded machine an example can take longer without anything being wrong, and
the suite asserts behaviour, never speed (speed lives in the benchmarks under ``load/``).
"""

from __future__ import annotations

from hypothesis import HealthCheck, settings

settings.register_profile("queuemesh", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("queuemesh")

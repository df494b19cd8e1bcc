"""Deciding a queue's next concurrency: the algorithm registry and the shared guards.

``decide`` (``guards.py``) applies the guards every algorithm shares (operator mode, bounds,
evidence cut at the last change, stale telemetry, too few calls, Retry-After) around one
``LimitAlgorithm``'s verdict on the ``Situation`` it builds; ``evaluate_manually`` is the
operator's manual evaluation. Adding an algorithm is one file in this package, one entry in
``ALGORITHMS`` and one ``PolicyAlgorithm`` allowed value in template.yaml
(docs/algorithms.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from controller.policy.adaptive import AdaptiveLimit
from controller.policy.aimd import Aimd
from controller.policy.base import EvidenceJudge, LimitAlgorithm, Situation, Verdict
from controller.policy.envoy_gradient import EnvoyGradient
from controller.policy.evidence import evidence_since
from controller.policy.gradient2 import Gradient2
from controller.policy.guards import decide, evaluate_manually
from controller.policy.netflix_aimd import NetflixAimd
from controller.policy.vector_arc import VectorArc
from controller.policy.vegas import Vegas

__all__ = [
    "ALGORITHMS",
    "ALGORITHM_VARIABLE",
    "DEFAULT_ALGORITHM",
    "EvidenceJudge",
    "LimitAlgorithm",
    "Situation",
    "Verdict",
    "algorithm_name",
    "algorithm_named",
    "decide",
    "evaluate_manually",
    "evidence_since",
    "memory_type",
]

# Every algorithm by name: the name is what QUEUEMESH_ALGORITHM, the template's
# PolicyAlgorithm, replay configs and the CLIs accept, and the ledger's memory key.
ALGORITHMS: dict[str, type[LimitAlgorithm[Any]]] = {
    Aimd.name: Aimd,
    AdaptiveLimit.name: AdaptiveLimit,
    NetflixAimd.name: NetflixAimd,
    Vegas.name: Vegas,
    Gradient2.name: Gradient2,
    VectorArc.name: VectorArc,
    EnvoyGradient.name: EnvoyGradient,
}
# Measured best on every shipped scenario (docs/simulator.md); the Lambda, replay and the
# simulator all start from it.
DEFAULT_ALGORITHM = AdaptiveLimit.name
# The deployed controller's environment variable naming its algorithm (the template's
# PolicyAlgorithm).
ALGORITHM_VARIABLE = "QUEUEMESH_ALGORITHM"


def algorithm_name(environ: Mapping[str, str]) -> str:
    """The algorithm a deployed controller's environment names, ``DEFAULT_ALGORITHM`` where it
    names none (read the same by the handler, replay's deployed config and the demo)."""
    return environ.get(ALGORITHM_VARIABLE, DEFAULT_ALGORITHM)


def algorithm_named(name: str) -> LimitAlgorithm[Any]:
    """A new instance of the algorithm registered as ``name``.

    Raises ``ValueError`` naming the known algorithms for any other name.
    """
    factory = ALGORITHMS.get(name)
    if factory is None:
        known = ", ".join(sorted(ALGORITHMS))
        raise ValueError(f"'algorithm' must be one of {known}; got {name!r}")
    return factory()


def memory_type(name: str) -> type[Any] | None:
    """The memory record of the algorithm registered as ``name`` (``None``: no such one)."""
    factory = ALGORITHMS.get(name)
    return None if factory is None else factory.memory_type

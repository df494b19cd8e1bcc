"""A replay's configuration: the policy, the queues as they start, the batching, the schedule
(docs/operations.md describes its JSON form)."""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from controller.constants import (
    DEFAULT_PRIORITY,
    DEFAULT_WEIGHT,
    MAX_CONCURRENCY,
    MIN_CONCURRENCY,
)
from controller.model import Mode, QueueConfig
from controller.policy import DEFAULT_ALGORITHM, algorithm_name
from controller.schema import NAMESPACE
from controller.settings import PolicyParams, SettingsError

DEFAULT_BATCH_SIZE = 1000
DEFAULT_BATCH_WINDOW_S = 1.0
MAX_BATCH_SIZE = 10_000
MAX_BATCH_WINDOW_S = 300.0
MODES = {"active": Mode.ACTIVE, "dry-run": Mode.DRY_RUN, "pinned": Mode.PINNED}
CONFIG_KEYS = {"params", "queues", "batching", "namespace", "algorithm", "schedule_s"}
MIN_SCHEDULE_S = 1.0
# template.yaml's wake-up schedule for the controller: rate(1 minute).
DEFAULT_SCHEDULE_S = 60.0
QUEUE_KEYS = {"esm_uuid", "mode", "overrides", "concurrency"}
BATCHING_KEYS = {"batch_size", "window_s"}


class ReplayError(ValueError):
    """A replay input (configuration, expected decisions) that cannot be used; the message
    names the file and what is wrong with it."""


@dataclass(frozen=True, slots=True)
class QueueSetup:
    """How a queue starts in a replay: registered, in a mode, with its mapping at a value."""

    esm_uuid: str | None = None
    mode: Mode = Mode.ACTIVE
    overrides: Mapping[str, float] = field(default_factory=dict)
    concurrency: int | None = None


@dataclass(frozen=True, slots=True)
class ReplayConfig:
    """``queues is None``: every queue seen in the recording, registered with the defaults."""

    params: PolicyParams = field(default_factory=PolicyParams)
    queues: Mapping[str, QueueSetup] | None = None
    batch_size: int = DEFAULT_BATCH_SIZE
    batch_window_s: float = DEFAULT_BATCH_WINDOW_S
    namespace: str = NAMESPACE
    algorithm: str = DEFAULT_ALGORITHM
    schedule_s: float | None = DEFAULT_SCHEDULE_S


def load_config(path: Path) -> ReplayConfig:
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise ReplayError(f"cannot read replay config {path}: {error.strerror}") from error
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ReplayError(f"replay config {path} is not JSON: {error}") from error
    try:
        return parse_config(raw)
    except (SettingsError, ValueError, TypeError) as error:
        raise ReplayError(f"replay config {path}: {error}") from error


def parse_config(raw: object) -> ReplayConfig:
    """The replay configuration from its JSON form (docs/operations.md describes it)."""
    from controller.policy import algorithm_named

    table = _object(raw, "the configuration", CONFIG_KEYS)
    params = PolicyParams().with_overrides(_numbers(table.get("params", {}), "'params'"))
    batching = _object(table.get("batching", {}), "'batching'", BATCHING_KEYS)
    batch_size = batching.get("batch_size", DEFAULT_BATCH_SIZE)
    if isinstance(batch_size, bool) or not isinstance(batch_size, int):
        raise ValueError(f"'batching.batch_size' must be a whole number, got {batch_size!r}")
    if not 1 <= batch_size <= MAX_BATCH_SIZE:
        raise ValueError(f"'batching.batch_size' must be 1..{MAX_BATCH_SIZE}, got {batch_size}")
    window = batching.get("window_s", DEFAULT_BATCH_WINDOW_S)
    if isinstance(window, bool) or not isinstance(window, int | float):
        raise ValueError(f"'batching.window_s' must be seconds, got {window!r}")
    if not 0 <= window <= MAX_BATCH_WINDOW_S:
        raise ValueError(f"'batching.window_s' must be 0..{MAX_BATCH_WINDOW_S:g}, got {window}")
    namespace = table.get("namespace", NAMESPACE)
    if not isinstance(namespace, str) or not namespace:
        raise ValueError(f"'namespace' must be a non-empty string, got {namespace!r}")
    algorithm = table.get("algorithm", DEFAULT_ALGORITHM)
    algorithm_named(algorithm)
    schedule_s = table.get("schedule_s", DEFAULT_SCHEDULE_S)
    if schedule_s is not None and (
        isinstance(schedule_s, bool)
        or not isinstance(schedule_s, int | float)
        or not MIN_SCHEDULE_S <= schedule_s <= 3600
    ):
        raise ValueError(f"'schedule_s' must be seconds in 1..3600 or null, got {schedule_s!r}")
    queues = None
    if "queues" in table:
        queues = {
            name: _queue_setup(name, spec, params)
            for name, spec in _object(table["queues"], "'queues'", None).items()
        }
        if "" in queues:
            raise ValueError("'queues': a queue name is empty; use the SQS queue's name")
    return ReplayConfig(
        params,
        queues,
        batch_size,
        float(window),
        namespace,
        algorithm,
        None if schedule_s is None else float(schedule_s),
    )


def config_document(config: ReplayConfig) -> dict[str, Any]:
    """The JSON form ``parse_config`` reads back as ``config``, every value spelled out (a
    default that changes later does not change what a written config replays)."""
    mode_names = {mode: name for name, mode in MODES.items()}
    document: dict[str, Any] = {
        "params": dataclasses.asdict(config.params),
        "batching": {"batch_size": config.batch_size, "window_s": config.batch_window_s},
        "namespace": config.namespace,
        "algorithm": config.algorithm,
        "schedule_s": config.schedule_s,
    }
    if config.queues is not None:
        document["queues"] = {
            name: {
                **({"esm_uuid": setup.esm_uuid} if setup.esm_uuid is not None else {}),
                "mode": mode_names[setup.mode],
                "overrides": dict(setup.overrides),
                **({"concurrency": setup.concurrency} if setup.concurrency is not None else {}),
            }
            for name, setup in config.queues.items()
        }
    return document


def deployed_config(
    environ: Mapping[str, str], configs: Iterable[QueueConfig], concurrency: Mapping[str, int]
) -> ReplayConfig:
    """The replay configuration of a deployed controller: the policy and algorithm its
    environment sets (read as ``controller.handler`` reads them) and the queues its ledger
    registers, each mapping starting at ``concurrency[queue]`` (a pinned queue at its pin).
    A queue in a named group, or with a weight or priority, is refused: a replay
    configuration does not carry them (a queue's group there is the downstream its telemetry
    names)."""
    queues: dict[str, QueueSetup] = {}
    for queue in configs:
        if (queue.group, queue.weight, queue.priority) != (None, DEFAULT_WEIGHT, DEFAULT_PRIORITY):
            raise ReplayError(
                f"queue {queue.queue!r} has a group, weight or priority, which a replay "
                "configuration does not carry"
            )
        pinned = queue.mode is Mode.PINNED
        queues[queue.queue] = QueueSetup(
            esm_uuid=queue.esm_uuid,
            mode=queue.mode,
            overrides={key: float(value) for key, value in queue.overrides.items()},
            concurrency=queue.pinned_concurrency if pinned else concurrency.get(queue.queue),
        )
    return ReplayConfig(
        params=PolicyParams.from_env(environ),
        queues=queues,
        algorithm=algorithm_name(environ),
    )


def _queue_setup(name: str, raw: object, params: PolicyParams) -> QueueSetup:
    spec = _object(raw, f"queue {name!r}", QUEUE_KEYS)
    mode_name = spec.get("mode", "active")
    if mode_name not in MODES:
        raise ValueError(f"queue {name!r}: 'mode' must be one of {sorted(MODES)}")
    overrides = _numbers(spec.get("overrides", {}), f"queue {name!r} 'overrides'")
    # Checked now, so a typo fails before the replay rather than in the middle of it.
    params.with_overrides(overrides)
    concurrency = spec.get("concurrency")
    if concurrency is not None and (
        isinstance(concurrency, bool)
        or not isinstance(concurrency, int)
        or not MIN_CONCURRENCY <= concurrency <= MAX_CONCURRENCY
    ):
        raise ValueError(
            f"queue {name!r}: 'concurrency' must be a whole number in "
            f"{MIN_CONCURRENCY}..{MAX_CONCURRENCY}"
        )
    esm_uuid = spec.get("esm_uuid")
    if esm_uuid is not None and (not isinstance(esm_uuid, str) or not esm_uuid):
        raise ValueError(f"queue {name!r}: 'esm_uuid' must be a non-empty string")
    return QueueSetup(
        esm_uuid=esm_uuid,
        mode=MODES[mode_name],
        overrides={key: float(value) for key, value in overrides.items()},
        concurrency=concurrency,
    )


def _numbers(raw: object, what: str) -> dict[str, float]:
    """Policy parameters by name: each a finite JSON number (``true`` and ``"5"`` are not;
    ``PolicyParams`` then checks the names and ranges)."""
    table = _object(raw, what, None)
    for key, value in table.items():
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
        ):
            raise ValueError(f"{what}: {key!r} must be a finite number, got {value!r}")
    return table


def _object(raw: object, what: str, allowed: set[str] | None) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise ValueError(f"{what} must be a JSON object")
    if allowed is not None:
        unknown = sorted(set(raw) - allowed)
        if unknown:
            raise ValueError(f"{what}: unknown key(s) {unknown}; known: {sorted(allowed)}")
    return raw

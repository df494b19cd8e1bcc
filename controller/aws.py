"""The one place that owns AWS call policy: backoff with full jitter, deadlines and pacing.

Adapters build their boto3 clients with botocore's own retries turned off (``client``) and
route every call through ``PacedCaller``, so how often and how long QueueMesh retries is
decided here and nowhere else.
"""

from __future__ import annotations

import random
import threading
import time
from collections import deque
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError, HTTPClientError, ParamValidationError
from botocore.exceptions import ConnectionError as BotoConnectionError

from controller.constants import ATTEMPT_TIMEOUT_S, CONNECT_TIMEOUT_S, READ_TIMEOUT_S

Clock = Callable[[], float]
Sleep = Callable[[float], None]


def client(service: str, **config: Any) -> Any:
    """A boto3 client whose retries are left to the caller (``PacedCaller``).

    The endpoint, region and credentials come from the environment (``AWS_ENDPOINT_URL``
    included), as for any boto3 client. Short timeouts keep one attempt well inside a deadline.
    """
    settings: dict[str, Any] = {
        "retries": {"mode": "standard", "total_max_attempts": 1},
        "connect_timeout": CONNECT_TIMEOUT_S,
        "read_timeout": READ_TIMEOUT_S,
    }
    settings.update(config)
    return boto3.client(service, config=Config(**settings))


@dataclass(frozen=True, slots=True)
class Backoff:
    """Exponential backoff with full jitter: attempt ``n`` waits ``uniform(0, ceiling(n))``."""

    base_s: float = 0.1
    cap_s: float = 5.0

    def __post_init__(self) -> None:
        if not 0 < self.base_s <= self.cap_s:
            raise ValueError("backoff needs 0 < base_s <= cap_s")

    def ceiling(self, attempt: int) -> float:
        # min() first keeps 2**attempt from overflowing a float on absurd attempt counts.
        return min(self.cap_s, self.base_s * 2 ** min(attempt, 64))

    def delay(self, attempt: int, rng: random.Random) -> float:
        return rng.uniform(0.0, self.ceiling(attempt))


class CallWindow:
    """At most ``calls`` calls in any ``window_s`` seconds; safe across threads.

    It remembers when its last ``calls`` calls were let through, and lets the next one go once
    the oldest of them is ``window_s`` old. Unlike a token bucket's, the allowance is that of
    the window, not of the last call: a caller slowed down between calls (a slow ledger write)
    catches up within the window, so a busy caller gets exactly ``calls`` per window, and a
    token bucket's burst on top of its rate (one more call in some second) cannot happen.
    Callers wait in turn, the lock held while one sleeps, so each release is the time read
    after its sleep and the next wait is measured from it.
    """

    def __init__(
        self,
        calls: int,
        window_s: float = 1.0,
        clock: Clock = time.monotonic,
        sleep: Sleep = time.sleep,
    ) -> None:
        if calls < 1 or window_s <= 0:
            raise ValueError("a call window needs calls >= 1 and window_s > 0")
        self.calls = calls
        self.window_s = window_s
        self._clock = clock
        self._sleep = sleep
        self._lock = threading.Lock()
        self._released: deque[float] = deque(maxlen=calls)

    @property
    def rate_per_s(self) -> float:
        """The sustained pace: ``calls`` per ``window_s``."""
        return self.calls / self.window_s

    def acquire(self, deadline: float) -> bool:
        """Wait for a slot; ``False`` (none taken) unless one comes before ``deadline``."""
        # Bounded by the lock's own ceiling: a deadline may be infinite (no deadline).
        waiting_s = min(max(0.0, deadline - self._clock()), threading.TIMEOUT_MAX)
        if not self._lock.acquire(timeout=waiting_s):
            return False
        try:
            now = self._clock()
            due = now
            if len(self._released) == self.calls:
                due = max(now, self._released[0] + self.window_s)
            if due >= deadline:
                return False
            if due > now:
                self._sleep(due - now)
            self._released.append(max(due, self._clock()))
            return True
        finally:
            self._lock.release()


class CallAbandoned(Exception):
    """A call failed for good: not retryable, out of attempts, or out of time.

    ``code`` is the AWS error code when the service answered (``None`` for connection errors or
    when no attempt could be made); the last error is chained as ``__cause__``.
    """

    def __init__(self, operation: str, attempts: int, code: str | None, why: str) -> None:
        super().__init__(f"{operation} failed after {attempts} attempt(s): {why}")
        self.operation = operation
        self.attempts = attempts
        self.code = code


def _attempt_timeout(client: Any) -> float:
    """How long one attempt may take: the client's connect plus read timeout, counted at most
    ``ATTEMPT_TIMEOUT_S`` (the controller's own clients' setting; an operator's tool with
    longer timeouts is not held to a Lambda deadline); 0 for a double without a config."""
    config = getattr(getattr(client, "meta", None), "config", None)
    connect, read = getattr(config, "connect_timeout", 0), getattr(config, "read_timeout", 0)
    if isinstance(connect, int | float) and isinstance(read, int | float):
        return min(float(connect + read), ATTEMPT_TIMEOUT_S)
    return 0.0


def error_code(error: ClientError) -> str:
    return str(error.response.get("Error", {}).get("Code", ""))


def _status(error: ClientError) -> int:
    metadata: Mapping[str, Any] = error.response.get("ResponseMetadata", {})
    return int(metadata.get("HTTPStatusCode") or 0)


class PacedCaller:
    """Calls one client's operations paced by a call window and retried within a deadline.

    Retried: the error codes in ``retryable``, errors ``retry_if`` accepts, any 5xx answer, and
    connection errors. Every other error is final at once. An attempt starts only if its
    backoff sleep, its slot in the window and its own worst case (the client's connect plus
    read timeout) all fit before the deadline, so a hanging call cannot outlive it;
    ``max_attempts`` bounds the loop whatever the clock does.
    """

    def __init__(
        self,
        client: Any,
        *,
        retryable: Collection[str],
        retry_if: Callable[[ClientError], bool] | None = None,
        backoff: Backoff | None = None,
        window: CallWindow | None = None,
        max_attempts: int = 8,
        clock: Clock = time.monotonic,
        sleep: Sleep = time.sleep,
        rng: random.Random | None = None,
    ) -> None:
        if max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        self.client = client
        self.retryable = frozenset(retryable)
        self._retry_if = retry_if
        self.backoff = backoff or Backoff()
        self.window = window
        self.max_attempts = max_attempts
        self._clock = clock
        self._sleep = sleep
        self._rng = rng or random.Random()
        self.attempt_timeout_s = _attempt_timeout(client)

    def call(self, operation: str, deadline: float, **params: Any) -> dict[str, Any]:
        method = getattr(self.client, operation)
        last_error: Exception | None = None
        last_code: str | None = None
        for attempt in range(self.max_attempts):
            if attempt > 0:
                pause = self.backoff.delay(attempt - 1, self._rng)
                if self._clock() + pause >= deadline:
                    raise CallAbandoned(
                        operation, attempt, last_code, f"no time left to retry: {last_error}"
                    ) from last_error
                self._sleep(pause)
            if self._clock() + self.attempt_timeout_s >= deadline:
                why = (
                    "deadline passed"
                    if self._clock() >= deadline
                    else f"an attempt ({self.attempt_timeout_s:g}s at worst) would end too late"
                )
                raise CallAbandoned(operation, attempt, last_code, why) from last_error
            if self.window is not None and not self.window.acquire(deadline):
                why = "no request slot (pacing) before the deadline"
                raise CallAbandoned(operation, attempt, last_code, why) from last_error
            try:
                result: dict[str, Any] = method(**params)
                return result
            except ClientError as error:
                last_error, last_code = error, error_code(error)
                if not self._retryable(error):
                    raise CallAbandoned(operation, attempt + 1, last_code, str(error)) from error
            except ParamValidationError as error:
                # The request itself is malformed (a hand-edited id): no retry can help.
                raise CallAbandoned(
                    operation, attempt + 1, "ParamValidation", str(error)
                ) from error
            except (BotoConnectionError, HTTPClientError) as error:
                last_error, last_code = error, None
        raise CallAbandoned(
            operation, self.max_attempts, last_code, f"out of attempts: {last_error}"
        ) from last_error

    def pause(self, attempt: int, deadline: float) -> bool:
        """Back off before retry ``attempt`` (0: the first) of work the caller repeats itself;
        ``False``, without sleeping, when the pause would reach the deadline."""
        pause = self.backoff.delay(attempt, self._rng)
        if self._clock() + pause >= deadline:
            return False
        self._sleep(pause)
        return True

    def _retryable(self, error: ClientError) -> bool:
        if error_code(error) in self.retryable or _status(error) >= 500:
            return True
        return self._retry_if is not None and self._retry_if(error)


# The first backoff of a call that retries briefly (``brief_caller``).
BRIEF_BACKOFF_BASE_S = 0.05


def brief_caller(
    service: str,
    given: Any,
    retryable: Collection[str],
    *,
    cap_s: float,
    max_attempts: int,
    clock: Clock = time.monotonic,
    sleep: Sleep = time.sleep,
    rng: random.Random | None = None,
) -> PacedCaller:
    """A caller for a call whose failure the caller can live with (a put retried at the next
    batch, a read that only informs): unpaced, at most ``max_attempts``, backing off from 50 ms
    to ``cap_s``. ``given`` is the adapter's client, or ``None`` for a new one of ``service``."""
    return PacedCaller(
        given if given is not None else client(service),
        retryable=retryable,
        backoff=Backoff(base_s=BRIEF_BACKOFF_BASE_S, cap_s=cap_s),
        max_attempts=max_attempts,
        clock=clock,
        sleep=sleep,
        rng=rng,
    )

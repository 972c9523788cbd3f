"""Pure timing policies: retry backoff, idle polling and the worker's loop-error delays.

Nothing here touches the database or the clock, so each policy is unit-testable alone.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from .durations import to_seconds


class BackoffPolicy(Protocol):
    """Anything that maps a failed attempt number (1-based) to a retry delay in seconds."""

    def delay(self, attempt: int) -> float: ...


DEFAULT_JITTER = 0.1  # the default steps are spread by ±10 %


def _jitter_fraction(value: object, what: str) -> float:
    """``True`` (the default ±10 %), ``False`` (none) or a fraction in ``[0, 1)``."""
    if value is True:
        return DEFAULT_JITTER
    if value is False:
        return 0.0
    if isinstance(value, int | float) and 0 <= value < 1:
        return float(value)
    raise ValueError(f"{what} must be True, False or a fraction from 0 to below 1, got {value!r}")


@dataclass(frozen=True)
class StepBackoff:
    """Fixed steps per attempt; the last step repeats (default: 1 min, 5 min, 30 min, 2 h, 6 h).

    Each delay is spread by ``jitter``: drawn uniformly from ``step * (1 ± jitter)``, ±10 %
    by default, so that jobs failing together (an outage) do not come back together and
    fail together again. ``jitter=False`` (or ``0``) gives the exact steps; a fraction such
    as ``0.25`` spreads by ±25 %.
    """

    steps: tuple[float, ...] = (60, 300, 1800, 7200, 21600)
    jitter: float | bool = True
    rng: Callable[[], float] = field(default=random.random, compare=False, repr=False)

    def __post_init__(self) -> None:
        if not self.steps:
            raise ValueError("StepBackoff needs at least one step")
        object.__setattr__(
            self,
            "steps",
            tuple(to_seconds(s, f"backoff step {i + 1}") for i, s in enumerate(self.steps)),
        )
        object.__setattr__(self, "jitter", _jitter_fraction(self.jitter, "StepBackoff jitter"))

    def delay(self, attempt: int) -> float:
        step = self.steps[min(max(attempt, 1), len(self.steps)) - 1]
        if not self.jitter:
            return step
        return step * (1 + self.jitter * (2 * self.rng() - 1))


@dataclass(frozen=True)
class ExponentialBackoff:
    """``base * factor ** (attempt - 1)`` capped at ``max_delay``, with "full jitter".

    With ``jitter=True`` the delay is drawn uniformly from ``[delay / 2, delay]`` so that a
    burst of failures does not come back as a burst of retries.
    """

    base: float = 10.0
    factor: float = 2.0
    max_delay: float = 3600.0
    jitter: bool = True
    rng: Callable[[], float] = field(default=random.random, compare=False, repr=False)

    def __post_init__(self) -> None:
        to_seconds(self.base, "ExponentialBackoff base", allow_zero=False)
        to_seconds(self.max_delay, "ExponentialBackoff max_delay", allow_zero=False)
        if not isinstance(self.factor, int | float) or self.factor < 1:
            raise ValueError(
                f"ExponentialBackoff factor must be a number >= 1, got {self.factor!r}"
            )

    def delay(self, attempt: int) -> float:
        exponent = min(max(attempt, 1) - 1, 64)
        raw = min(float(self.base) * float(self.factor) ** exponent, float(self.max_delay))
        if not self.jitter:
            return raw
        return raw / 2 + self.rng() * raw / 2


BackoffSpec = BackoffPolicy | Sequence[float] | Callable[[int], float] | str | dict


@dataclass(frozen=True)
class CallableBackoff:
    """Adapts a plain ``fn(attempt) -> seconds`` function."""

    fn: Callable[[int], float]

    def delay(self, attempt: int) -> float:
        return to_seconds(self.fn(attempt), "backoff function result")


def make_backoff(spec: object, what: str = "backoff") -> BackoffPolicy:
    """Build a policy from a setting or ``@job(backoff=...)`` value.

    Accepted: a policy object (has ``.delay``); a list of seconds/timedeltas (steps, spread
    ±10 %); ``"default"`` or ``"steps"``; ``"exponential"``; a dict
    ``{"kind": "exponential", "base": 10, "factor": 2, "max_delay": 3600, "jitter": True}``
    or ``{"kind": "steps", "steps": [...], "jitter": False}``; a callable
    ``fn(attempt) -> seconds``.
    """
    if hasattr(spec, "delay") and callable(spec.delay):
        return spec
    if spec in ("default", "steps"):
        return StepBackoff()
    if spec == "exponential":
        return ExponentialBackoff()
    if isinstance(spec, list | tuple):
        return StepBackoff(tuple(spec))
    if isinstance(spec, dict):
        options = dict(spec)
        kind = options.pop("kind", None)
        try:
            if kind == "exponential":
                return ExponentialBackoff(**options)
            if kind == "steps":
                return StepBackoff(tuple(options.pop("steps", StepBackoff.steps)), **options)
        except TypeError as exc:
            raise ValueError(f"{what}: {exc}") from None
        raise ValueError(f"{what}: 'kind' must be 'steps' or 'exponential', got {kind!r}")
    if callable(spec):
        return CallableBackoff(spec)
    raise ValueError(
        f"{what} must be 'default', 'exponential', a list of delays, a dict with 'kind', "
        f"a callable or a policy object, got {spec!r}"
    )


@dataclass(frozen=True)
class DelaySequence:
    """Delay after the n-th consecutive empty poll or loop error; the last value repeats."""

    delays: tuple[float, ...]

    def __post_init__(self) -> None:
        if not self.delays:
            raise ValueError("a delay sequence needs at least one value")

    def delay(self, streak: int) -> float:
        return self.delays[min(max(streak, 0), len(self.delays) - 1)]


def make_delays(spec: object, what: str) -> DelaySequence:
    """Build a DelaySequence from a list of durations, raising ValueError naming ``what``."""
    if not isinstance(spec, list | tuple) or not spec:
        raise ValueError(f"{what} must be a non-empty list of durations, got {spec!r}")
    return DelaySequence(tuple(to_seconds(v, f"{what}[{i}]") for i, v in enumerate(spec)))

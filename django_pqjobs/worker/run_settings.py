"""What the attempts of one claimed batch run with: the hooks, the result size limit and the
tracer, read once per claim instead of once per job.

Each read goes through ``conf`` (which re-validates when the settings change, so that
``override_settings`` works) or asks OpenTelemetry for its tracer provider, which, four
times per job, cost a no-op job more than running its handler. A batch
is claimed every few milliseconds under load, so a settings change still takes effect
within one claim.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .. import tracing
from ..conf import conf
from .hooks import Hooks


@dataclass(frozen=True)
class RunSettings:
    hooks: Hooks
    result_max_bytes: int | None
    tracer: Any  # None when tracing is not in use

    @classmethod
    def read(cls) -> RunSettings:
        """The settings as they are now."""
        return cls(Hooks.configured(), conf.RESULT_MAX_BYTES, tracing.tracer())

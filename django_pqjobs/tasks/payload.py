"""How a task call is stored in a job's payload, and how it reads back.

``{"args": [...], "kwargs": {...}, "task_backend": "<TASKS alias>"}``. The ``task_backend`` key
marks a job as a task job. Nothing here imports the Tasks framework, so the admin can use it.
"""

from __future__ import annotations

import json
from typing import Any

BACKEND_KEY = "task_backend"


def build(alias: str, args: list[Any], kwargs: dict[str, Any]) -> dict[str, Any]:
    return {"args": args, "kwargs": kwargs, BACKEND_KEY: alias}


def is_task_payload(payload: object) -> bool:
    return (
        isinstance(payload, dict)
        and isinstance(payload.get(BACKEND_KEY), str)
        and isinstance(payload.get("args"), list)
        and isinstance(payload.get("kwargs"), dict)
    )


def unpack(payload: object) -> tuple[str, list[Any], dict[str, Any]]:
    """``(backend alias, args, kwargs)``; ValueError if the payload is not a task call."""
    if not is_task_payload(payload):
        raise ValueError(
            "the job's payload is not a task call "
            f"({{'args': [...], 'kwargs': {{...}}, {BACKEND_KEY!r}: alias}}): {payload!r:.200}"
        )
    assert isinstance(payload, dict)
    return payload[BACKEND_KEY], payload["args"], payload["kwargs"]


def describe_call(job_type: str, payload: object, limit: int = 300) -> str | None:
    """``send_receipt(42, to="a@example.com")`` for a task job, None for any other job."""
    if not is_task_payload(payload):
        return None
    _alias, args, kwargs = unpack(payload)
    parts = [_literal(value) for value in args]
    parts += [f"{name}={_literal(value)}" for name, value in kwargs.items()]
    text = f"{job_type.rpartition('.')[2]}({', '.join(parts)})"
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _literal(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)

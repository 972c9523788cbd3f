"""Flow control in the admin: what is paused (and the Pause / Resume buttons), the limits and
rates declared per job type, and what holds jobs back now.

Pausing and resuming go through ``django_pqjobs.flow`` with the operator's name, so they are
shown with who and since when, and recorded in the audit trail. Names are validated by
``options.py`` as everywhere else.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django import forms
from django.contrib import messages
from django.http import HttpRequest

from .. import flow, options
from ..conf import conf
from ..errors import InvalidJobOption
from ..printable import counted
from ..registry import registry
from . import display
from .filters import distinct_job_types

KINDS = {"queue": "queue", "job_type": "job type"}


@dataclass
class FlowControl:
    """What the dashboard shows of flow control (a few small queries)."""

    paused: list[flow.Paused]
    held: list[flow.Held]
    declared: list[flow.Declared]
    queue_rates: list[tuple[str, str]]
    known_queues: list[str] = field(default_factory=list)
    known_job_types: list[str] = field(default_factory=list)

    @property
    def held_total(self) -> int:
        return sum(h.jobs for h in self.held)


def collect(alias: str, paused: list[flow.Paused], seen_queues: list[str]) -> FlowControl:
    """Flow control now, read from ``alias``; ``paused`` as read already, ``seen_queues``:
    queues the dashboard found jobs in."""
    return FlowControl(
        paused=paused,
        held=flow.held(using=alias),
        declared=flow.declared(),
        queue_rates=[(queue, str(rate)) for queue, rate in sorted(conf.QUEUE_RATES.items())],
        known_queues=sorted({*flow.known_queues(), *seen_queues}),
        known_job_types=sorted({*registry.names(), *distinct_job_types(alias)}),
    )


class PauseForm(forms.Form):
    """A queue or a job type to pause or resume, typed or picked from the known ones."""

    kind = forms.ChoiceField(choices=list(KINDS.items()))
    name = forms.CharField(strip=False, max_length=options.NAME_MAX_LENGTH)

    def clean(self) -> dict[str, object]:
        cleaned = super().clean() or {}
        kind, name = cleaned.get("kind"), cleaned.get("name")
        if kind and name is not None:
            validate = options.queue_name if kind == "queue" else options.job_type_name
            try:
                cleaned["name"] = validate(name, f"{KINDS[str(kind)]} name")
            except InvalidJobOption as exc:
                self.add_error("name", str(exc))
        return cleaned


def pause_or_resume(request: HttpRequest, pause: bool, by: str) -> tuple[str, int]:
    """Do what the posted form asks; return the message and its level."""
    form = PauseForm(request.POST)
    if not form.is_valid():
        errors = "; ".join(str(e) for errs in form.errors.values() for e in errs)
        return f"Nothing {'paused' if pause else 'resumed'}: {errors}", messages.ERROR
    kind, name = form.cleaned_data["kind"], form.cleaned_data["name"]
    what = f"{KINDS[kind]} {name!r}"
    if pause:
        do_pause = flow.pause_queue if kind == "queue" else flow.pause_job_type
        if not do_pause(name, by=by, using=conf.DATABASE):
            return f"The {what} was paused already.", messages.WARNING
        text = (
            f"Paused the {what}: workers start none of its jobs from now on (running ones finish)."
        )
        why = flow.undeclared(kind, name, conf.DATABASE)
        if why is not None:
            text += f" Check the spelling: {why}" + ("" if why.endswith("?") else ".")
        return text, messages.SUCCESS
    do_resume = flow.resume_queue if kind == "queue" else flow.resume_job_type
    released = do_resume(name, by=by, using=conf.DATABASE)
    if released is None:
        return f"The {what} was not paused.", messages.WARNING
    return (
        f"Resumed the {what}: {counted(released, 'job')} held by the pause went back to ready.",
        messages.SUCCESS,
    )


def paused_rows(paused: list[flow.Paused]) -> list[dict[str, Any]]:
    """The pauses as the dashboard and the job list show them."""
    return [
        {
            "kind": p.kind,
            "kind_label": KINDS.get(p.kind, p.kind),
            "name": p.name,
            "by": p.paused_by,
            "since": display.moment(p.paused_at),
        }
        for p in paused
    ]

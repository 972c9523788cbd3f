"""The schedule's form in the admin: it holds a schedule to what ``enqueue_job`` accepts (a
registered job type, a payload within ``PQJOBS['PAYLOAD_MAX_BYTES']`` that PostgreSQL can
store, queue and priority as ``options.py`` validates them, a valid cron expression, interval
and time zone), and shows what a schedule runs read-only to a user who may not enqueue jobs
(a request that sends new values for it anyway is refused with the reason). The admin:
``schedules.py``."""

from __future__ import annotations

from typing import Any

from django import forms
from django.forms.fields import InvalidJSONInput
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from .. import options
from ..enqueue import serialize_payload
from ..errors import PQJobsError
from ..models import Schedule
from ..recurrence import (
    ScheduleError,
    validate_cron,
    validate_interval,
    validate_timezone,
)
from ..registry import registry
from ..serialization import from_json

LISTED_JOB_TYPES = 500
WHAT_RUNS = ("job_type", "payload", "queue", "priority")


class PayloadField(forms.JSONField):
    """JSON typed into the form. Text Python cannot parse (nested past its recursion limit,
    an integer of thousands of digits) is a form error too, and the text is shown back as
    typed."""

    def to_python(self, value: Any) -> Any:
        try:
            return super().to_python(value)
        except (RecursionError, ValueError):
            raise forms.ValidationError(
                "Enter JSON that Python can read: it nests too deeply or holds a number "
                "with too many digits.",
                code="invalid",
            ) from None

    def bound_data(self, data: Any, initial: Any) -> Any:
        return data if self.disabled or data is None else InvalidJSONInput(data)


class JobTypeInput(forms.TextInput):
    """A text input that suggests the registered job types."""

    def render(
        self, name: str, value: Any, attrs: dict[str, Any] | None = None, renderer: Any = None
    ) -> SafeString:
        list_id = f"{(attrs or {}).get('id') or name}_registered"
        field = super().render(name, value, {**(attrs or {}), "list": list_id}, renderer)
        names = registry.names()[:LISTED_JOB_TYPES]
        items = format_html_join("", '<option value="{}">', ((n,) for n in names))
        return format_html('{}<datalist id="{}">{}</datalist>', field, list_id, items)


class ScheduleForm(forms.ModelForm):
    payload = PayloadField(
        required=False,
        help_text="JSON, as enqueue_job takes it (at most PQJOBS['PAYLOAD_MAX_BYTES']). Blank: {}.",
    )

    class Meta:
        model = Schedule
        fields = [
            "name",
            "job_type",
            "cron",
            "interval_seconds",
            "timezone",
            "payload",
            "queue",
            "priority",
            "enabled",
            "overlap",
            "misfire",
        ]
        widgets = {"job_type": JobTypeInput}
        help_texts = {"job_type": "A job type registered with @job in this project."}

    # Whether the user may decide what runs (see ScheduleAdmin.get_form).
    may_enqueue = True

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if not self.may_enqueue:
            # disabled: the form keeps the stored value whatever a request sends
            for name in WHAT_RUNS:
                field = self.fields[name]
                field.disabled = True
                field.help_text = "Changing what a schedule runs needs the permission to add jobs."

    def _changes_refused(self) -> list[str]:
        """The read-only fields a request sent a new value for anyway (a browser sends no
        disabled field: only a crafted request does)."""
        tried = []
        for name in WHAT_RUNS:
            field = self.fields[name]
            if self.add_prefix(name) not in self.data:
                continue
            sent = field.widget.value_from_datadict(self.data, self.files, self.add_prefix(name))
            field.disabled = False  # has_changed() says False for a disabled field
            try:
                if field.has_changed(self.get_initial_for_field(field, name), sent):
                    tried.append(name)
            finally:
                field.disabled = True
        return tried

    def clean_name(self) -> str:
        return _validated(options.schedule_name, self.cleaned_data.get("name"))

    def clean_job_type(self) -> str:
        name = _validated(options.job_type_name, self.cleaned_data.get("job_type"))
        if registry.resolve(name) is None:
            raise forms.ValidationError(
                f"No handler is registered for job type {name!r} in this project: every run "
                "would fail with 'no handler registered'. Use a type registered with @job."
            )
        return name

    def clean_payload(self) -> Any:
        value = self.cleaned_data.get("payload")
        job_type = self.cleaned_data.get("job_type") or "?"
        try:
            return from_json(serialize_payload(job_type, value))
        except PQJobsError as exc:
            raise forms.ValidationError(str(exc)) from None

    def clean_queue(self) -> str:
        value = self.cleaned_data.get("queue") or ""
        return _validated(options.queue_name, value) if value else ""

    def clean_priority(self) -> int | None:
        value = self.cleaned_data.get("priority")
        return None if value is None else _validated(options.priority, value)

    def clean_cron(self) -> str:
        value = (self.cleaned_data.get("cron") or "").strip()
        if not value:
            return ""
        try:
            return validate_cron(value)
        except ScheduleError as exc:
            raise forms.ValidationError(str(exc)) from None

    def clean_interval_seconds(self) -> float | None:
        value = self.cleaned_data.get("interval_seconds")
        if value is None:
            return None
        try:
            return validate_interval(value)
        except ScheduleError as exc:
            raise forms.ValidationError(str(exc)) from None

    def clean_timezone(self) -> str:
        value = (self.cleaned_data.get("timezone") or "").strip()
        try:
            return validate_timezone(value)
        except ScheduleError as exc:
            raise forms.ValidationError(str(exc)) from None

    def clean(self) -> dict[str, Any]:
        super().clean()
        cleaned = self.cleaned_data
        if not self.may_enqueue:
            if self.instance.pk is None:
                raise forms.ValidationError("Creating a schedule needs the permission to add jobs.")
            tried = self._changes_refused()
            if tried:
                raise forms.ValidationError(
                    f"Not saved: changing what a schedule runs ({', '.join(tried)}) needs the "
                    "permission to add jobs (django_pqjobs.add_job)."
                )
        if "cron" in self.errors or "interval_seconds" in self.errors:
            return cleaned
        has_cron = bool(cleaned.get("cron"))
        has_interval = cleaned.get("interval_seconds") is not None
        if has_cron and has_interval:
            self.add_error(
                "cron", "Give either a cron expression or an interval, not both: clear one."
            )
        elif not has_cron and not has_interval:
            self.add_error(
                "cron", "Give a cron expression (e.g. '0 3 * * *') or an interval in seconds."
            )
        return cleaned


def _validated(validate: Any, value: Any) -> Any:
    """``validate(value)`` from ``options.py``, its refusal as a form error."""
    try:
        return validate(value)
    except ValueError as exc:
        raise forms.ValidationError(str(exc)) from None

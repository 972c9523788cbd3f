"""The form that sends a workflow a signal from its job page."""

from __future__ import annotations

import json
from typing import Any

from django import forms
from django.core.exceptions import ValidationError

from ..errors import InvalidJobOption
from ..options import NAME_MAX_LENGTH, job_type_name


class SignalForm(forms.Form):
    name = forms.CharField(
        max_length=NAME_MAX_LENGTH, help_text="The name the job's wait_for_signal() waits for."
    )
    payload = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 6, "cols": 60}),
        help_text="JSON, what wait_for_signal() returns (empty: null).",
    )

    def clean_name(self) -> str:
        try:
            return job_type_name(self.cleaned_data["name"], "the signal's name")
        except InvalidJobOption as exc:
            raise ValidationError(str(exc)) from None

    def clean_payload(self) -> Any:
        text = self.cleaned_data["payload"].strip()
        if not text:
            return None
        try:
            return json.loads(text)
        except (ValueError, RecursionError) as exc:
            raise ValidationError(f"not JSON: {exc}") from None

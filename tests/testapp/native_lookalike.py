"""A module whose name a native job type may carry: importing it leaves an Effect row, so a
test can show that the task resolver never imports it for a job that is not a task job."""

from .models import Effect

Effect.objects.create(key="testapp.native_lookalike was imported")


def handler(*args: object) -> None:
    Effect.objects.create(key="testapp.native_lookalike.handler was called")

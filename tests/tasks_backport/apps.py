from django.apps import AppConfig


class TasksBackportConfig(AppConfig):
    """An app written against the ``django_tasks`` backport only (any Django)."""

    name = "tests.tasks_backport"
    label = "tasks_backport"

    def ready(self) -> None:
        from django.conf import settings

        from . import receivers

        if getattr(settings, "TASKS_TEST_RECORD_SIGNALS", False):
            receivers.connect()

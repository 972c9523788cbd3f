from django.apps import AppConfig


class TasksBuiltinConfig(AppConfig):
    """An app written against Django's built-in ``django.tasks`` only (Django 6.1+)."""

    name = "tests.tasks_builtin"
    label = "tasks_builtin"

    def ready(self) -> None:
        from django.conf import settings

        from . import receivers

        if getattr(settings, "TASKS_TEST_RECORD_SIGNALS", False):
            receivers.connect()

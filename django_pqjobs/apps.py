from django.apps import AppConfig


class PQJobsConfig(AppConfig):
    name = "django_pqjobs"
    label = "django_pqjobs"
    verbose_name = "Job queue"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.utils.module_loading import autodiscover_modules

        from . import checks  # noqa: F401 - registers the system checks

        autodiscover_modules("jobs")

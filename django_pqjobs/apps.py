from django.apps import AppConfig
from django.core.checks import Tags, register


class PQJobsConfig(AppConfig):
    name = "django_pqjobs"
    label = "django_pqjobs"
    verbose_name = "Job queue"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.db.models.signals import post_migrate
        from django.utils.module_loading import autodiscover_modules

        from .checks import check_database, check_handlers, check_settings
        from .declarations import publish_after_migrate
        from .schedules.checks import check_schedules
        from .tasks.activation import activate

        # 'compatibility', not 'database': Django 6 runs database-tagged checks only with
        # `check --database`, which would hide a non-PostgreSQL engine.
        register(check_settings, Tags.compatibility)
        register(check_schedules, Tags.compatibility)
        register(check_handlers, Tags.compatibility)
        register(check_database, Tags.database)
        autodiscover_modules("jobs")
        activate()  # the Tasks framework backend's worker side, if TASKS names it
        # encrypted job types reach pqjobs_protected_type, so SQL enqueues of them are refused
        post_migrate.connect(publish_after_migrate, sender=self)

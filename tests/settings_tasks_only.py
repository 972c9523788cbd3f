"""A project whose only jobs are the Tasks framework's ``@task`` functions: no app has a
jobs.py. ``run_jobs`` must say what it will run (tests/integration/test_commands.py)."""

import importlib.util

from tests.settings import *  # noqa: F403

INSTALLED_APPS = ["django.contrib.auth", "django.contrib.contenttypes", "django_pqjobs"]
if importlib.util.find_spec("django_tasks") is not None:
    INSTALLED_APPS += ["django_tasks"]
PQJOBS = {key: value for key, value in PQJOBS.items() if key != "HOOKS"}  # noqa: F405
ROOT_URLCONF = "tests.settings_tasks_only"
urlpatterns: list = []

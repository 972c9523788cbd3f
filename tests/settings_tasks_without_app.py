"""A project that configures the Tasks framework backend but forgot to install django_pqjobs:
``manage.py check`` must say so (tests/integration/test_tasks_backend.py)."""

from tests.settings import *  # noqa: F403

INSTALLED_APPS = [
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django_tasks",
]
ROOT_URLCONF = "tests.settings_tasks_without_app"
urlpatterns: list = []

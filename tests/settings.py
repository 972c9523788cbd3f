"""Settings for the test suite: a real PostgreSQL from DATABASE_URL (never SQLite).

Worker subprocesses started by tests set PQJOBS_TEST_DATABASE to the name of the test
database pytest-django created, so that they work on the same tables as the test.
"""

import os
import sys
from pathlib import Path

import environ

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "testproject"))

env = environ.Env()

SECRET_KEY = "tests-only"
DEBUG = False
ALLOWED_HOSTS = ["*"]
USE_TZ = True
TIME_ZONE = "UTC"

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_pqjobs",
    "shop",
    "tests.testapp",
]

MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]

ROOT_URLCONF = "tests.urls"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]

DATABASES = {"default": env.db("DATABASE_URL", default="postgres://postgres@127.0.0.1:5432/pqjobs")}
if os.environ.get("PQJOBS_TEST_DATABASE"):
    DATABASES["default"]["NAME"] = os.environ["PQJOBS_TEST_DATABASE"]
    DATABASES["default"]["TEST"] = {"NAME": os.environ["PQJOBS_TEST_DATABASE"]}

STATIC_URL = "static/"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

PQJOBS = {
    "POLL_INTERVALS": [0.2, 0.5, 1],
    "LOOP_ERROR_DELAYS": [0.1, 0.2, 0.5],
    "SHUTDOWN_TIMEOUT": 5,
    "TIMEOUT_GRACE": 1,
    # Set here, not per test: isolated jobs run in children of a fork server that read the
    # settings once. The hooks only record jobs whose payload asks for it.
    "HOOKS": {
        "pre_execute": "tests.testapp.hooks.pre_execute",
        "post_execute": "tests.testapp.hooks.post_execute",
    },
}

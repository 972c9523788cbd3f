"""Settings for the test suite: a real PostgreSQL from DATABASE_URL (never SQLite).

scripts/test.sh sets DATABASE_URL (see scripts/devdb.py).

Worker subprocesses started by tests set PQJOBS_TEST_DATABASE to the name of the test
database pytest-django created, so that they work on the same tables as the test (and on
the same second database, whose test name is that name + "_second").
"""

import hashlib
import importlib.util
import os
import re
import sys
from pathlib import Path

import django
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

# Without DATABASE_URL: this checkout's own database on the machine's server, the one
# scripts/devdb.py names (pytest-django tests in test_<it>), never a name shared by checkouts.
CHECKOUT_DATABASE = f"pqjobs_{hashlib.sha1(str(ROOT).encode()).hexdigest()[:8]}"
DATABASES = {
    "default": env.db(
        "DATABASE_URL", default=f"postgres://postgres@127.0.0.1:5432/{CHECKOUT_DATABASE}"
    )
}
# A second database holding job tables of its own, for the commands' --database flag. Its
# test database is created only when a test asks for it (django_db(databases=[...])).
DATABASES["second"] = {
    **DATABASES["default"],
    "TEST": {"NAME": f"test_{DATABASES['default']['NAME']}_second"},
}
if os.environ.get("PQJOBS_TEST_DATABASE"):
    # Under pytest-xdist each test process has its databases, suffixed _gw0, _gw1...: the
    # default one test_<name>_gw0, the second test_<name>_second_gw0.
    _given = os.environ["PQJOBS_TEST_DATABASE"]
    _base, _xdist = re.match(r"(.*?)(_gw\d+)?$", _given).groups()  # type: ignore[union-attr]
    for alias, name in [("default", _given), ("second", f"{_base}_second{_xdist or ''}")]:
        DATABASES[alias]["NAME"] = name
        DATABASES[alias]["TEST"] = {"NAME": name}
# Worker processes of the PgBouncer tests reach the database through PgBouncer
# (DATABASE_URL) and LISTEN on a direct connection, as the docs tell users to.
if os.environ.get("PQJOBS_TEST_LISTEN_URL"):
    DATABASES["direct"] = {
        **env.db("PQJOBS_TEST_LISTEN_URL"),
        "NAME": DATABASES["default"]["NAME"],
        "TEST": {"NAME": DATABASES["default"]["NAME"]},
    }

# The replica tests (test_read_replica.py) read the console's lists from a streaming standby.
if os.environ.get("PQJOBS_TEST_READ_URL"):
    DATABASES["replica"] = {
        **env.db("PQJOBS_TEST_READ_URL"),
        "TEST": {"MIRROR": "default"},
    }

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
    # for the encrypted job types of the test app (a key made for the tests, nothing else)
    "ENCRYPTION_KEYS": ["N_MkSMHJoaxg2V0eDGryUHEwe7ZgmsmWl7XeUoWzGfQ="],
    # Workers move no job to history partitions (nor make the partitions ahead) unless a test
    # says so (tests/integration/test_history.py): partitions one test's worker made would
    # outlive it and change what the next test's planner estimates.
    "HISTORY_AFTER": None,
}
if "direct" in DATABASES:
    PQJOBS["LISTEN_DATABASE"] = "direct"
if "replica" in DATABASES:
    PQJOBS["READ_DATABASE"] = "replica"

# --- Django's Tasks framework (tests/integration/test_tasks_*.py) ------------------------------
# Each framework's test app is installed when that framework is: django.tasks (built in from
# Django 6.0; its app uses @task keywords, which Django passes on from 6.1) and the
# django_tasks backport (`pip install django-pqjobs[tasks]`). Both read this one TASKS.
if importlib.util.find_spec("django_tasks") is not None:
    INSTALLED_APPS += ["django_tasks", "tests.tasks_backport"]

if django.VERSION >= (6, 1):
    INSTALLED_APPS += ["tests.tasks_builtin"]

# The test apps record their framework's signals (see tests/tasks_*/receivers.py).
TASKS_TEST_RECORD_SIGNALS = True

TASKS = {
    "default": {
        "BACKEND": "django_pqjobs.tasks.PQJobsBackend",
        "QUEUES": ["default", "emails"],
        "OPTIONS": {"MAX_ATTEMPTS": 1},
    },
    "retrying": {
        "BACKEND": "django_pqjobs.tasks.PQJobsBackend",
        "OPTIONS": {"MAX_ATTEMPTS": 2, "BACKOFF": [0.5]},
    },
}

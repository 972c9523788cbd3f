"""Settings of the example project, read from the environment with django-environ.

DATABASE_URL   PostgreSQL to use (scripts/demo.sh starts an embedded one when unset)
SECRET_KEY     Django secret key (a development default is used when unset)
DEBUG          true/false
WORKER_ENABLED, WORKER_CONCURRENCY, WORKER_REAP_INTERVAL, WORKER_STALE_TIMEOUT
               read by django-pqjobs itself (see docs/reference/settings.md)
"""

from pathlib import Path

import environ

BASE_DIR = Path(__file__).resolve().parent.parent
env = environ.Env(DEBUG=(bool, True))

SECRET_KEY = env("SECRET_KEY", default="dev-only-insecure-key-change-me")
DEBUG = env("DEBUG")
ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", default=["localhost", "127.0.0.1"])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_pqjobs",
    "shop",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "config.urls"
WSGI_APPLICATION = "config.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
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

USE_TZ = True
TIME_ZONE = "UTC"
STATIC_URL = "static/"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

PQJOBS = {
    # The demo wants to show retries within seconds, not minutes.
    "BACKOFF": [2, 4, 8],
    "POLL_INTERVALS": [0.5, 1, 2, 5],
    # A recurring job, so the demo shows schedules at work. The same could be declared on
    # the handler: @job("order_stats", interval=60). Once a minute: every 5 s, its runs
    # pushed the demo's failed and retried jobs off the job list's first screen within a
    # minute of serving the admin.
    "SCHEDULES": [{"name": "order-stats", "job_type": "order_stats", "interval": 60}],
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)-7s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "loggers": {"django_pqjobs": {"handlers": ["console"], "level": "INFO"}},
}

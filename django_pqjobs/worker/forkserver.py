"""What the fork server imports when it starts (its preload).

Django is set up once there, so every child forked for an isolated job starts with the
project's apps and handlers already imported, and with no database connection. Kept apart
from ``child.py`` so that importing the worker never sets Django up as a side effect.
"""

import os

import django
from django.apps import apps

if not apps.ready and os.environ.get("DJANGO_SETTINGS_MODULE"):
    django.setup()

from . import child  # noqa: F401 - the children's entry point, imported once here

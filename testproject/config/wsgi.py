"""WSGI entry point. Set WORKER_EMBEDDED=true to run the job worker inside the web process."""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
application = get_wsgi_application()

if os.environ.get("WORKER_EMBEDDED", "").lower() in {"1", "true", "yes"}:
    from django_pqjobs import start_embedded_worker

    start_embedded_worker()

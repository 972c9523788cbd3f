"""Running the worker inside the web process, for small deployments."""

from __future__ import annotations

import atexit
import logging
from typing import TYPE_CHECKING, Any

from .conf import conf

if TYPE_CHECKING:
    from .worker.worker import Worker

logger = logging.getLogger("django_pqjobs")


def start_embedded_worker(**options: Any) -> Worker | None:
    """Start a worker in a background thread of this process and return it.

    Call it once from ``wsgi.py`` or ``asgi.py`` after the application is created. Takes
    the keyword arguments of :class:`~django_pqjobs.worker.worker.Worker`; concurrency
    defaults to ``PQJOBS['CONCURRENCY']`` / ``WORKER_CONCURRENCY``. Returns None without
    starting anything when ``WORKER_ENABLED=false`` (``PQJOBS['ENABLED']``). The worker
    stops gracefully when the process exits.
    """
    if not conf.ENABLED:
        logger.info("embedded worker not started: the worker is disabled (WORKER_ENABLED)")
        return None
    # Imported here: the package's __init__ imports this module before Django has loaded
    # the models, which the worker needs.
    from .worker.worker import Worker

    worker = Worker(install_signal_handlers=False, **options)
    thread = worker.run_in_thread("pqjobs-embedded")

    def _stop() -> None:
        worker.stop()
        thread.join(timeout=worker.shutdown_timeout + 5)

    atexit.register(_stop)
    return worker

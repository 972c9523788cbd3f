"""Process isolation: a job runs in a child process that can be killed.

Children are forked from a *fork server*: a clean process started once, which imports
Django and the project's apps up front (``django.setup()`` in :mod:`.forkserver`) and never
opens a database connection. Forking from it is cheap and safe; forking the threaded
worker itself would copy locks held by other threads and its open connections.

How the child ended becomes the attempt's verdict:

- a message from the child: the :class:`~django_pqjobs.verdicts.Verdict` it decided with
  the same classifier as an executor thread (success, or the handler's exception);
- ``timeout``: still running at the deadline, so we killed it;
- ``killed``: it died of SIGKILL that we did not send (most often the kernel's OOM killer);
- ``crashed``: it died of another signal (SIGSEGV, SIGABRT, ...);
- ``exited``: it exited with a status before reporting (``os._exit(3)``, ``sys.exit``).
"""

from __future__ import annotations

import multiprocessing
import signal
import threading
import time
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any

from django.db import connections

from ..errors import JobCancelled, JobTimeout
from ..statuses import FailureKind
from ..verdicts import Verdict
from .child import child_main
from .slots import Slot

if TYPE_CHECKING:
    from multiprocessing.context import ForkServerContext

POLL_INTERVAL = 0.02
_context: ForkServerContext | None = None
_context_lock = threading.Lock()


def get_context() -> ForkServerContext:
    global _context
    with _context_lock:
        if _context is None:
            context = multiprocessing.get_context("forkserver")
            context.set_forkserver_preload(["django_pqjobs.worker.forkserver"])
            _context = context
        return _context


def job_fields(slot: Slot) -> dict[str, Any]:
    """Every field of the claimed job, for the child to build the same Job from: a handler
    sees the same job (its batch, dependencies, keys...) whichever way it runs."""
    job = slot.job
    return {field.attname: getattr(job, field.attname) for field in job._meta.concrete_fields}


def classify_exit(exitcode: int | None) -> Verdict:
    """The verdict on a child that ended without reporting one."""
    if exitcode is not None and exitcode < 0:
        signum = -exitcode
        try:
            name = signal.Signals(signum).name
        except ValueError:
            name = f"signal {signum}"
        if signum == signal.SIGKILL:
            return Verdict.of_failure(
                FailureKind.KILLED,
                "ChildKilled",
                "the job's process was killed by SIGKILL that the worker did not send "
                "(most likely the kernel's out-of-memory killer)",
            )
        return Verdict.of_failure(
            FailureKind.CRASHED, f"ChildCrashed({name})", f"the job's process crashed: {name}"
        )
    return Verdict.of_failure(
        FailureKind.EXITED,
        "ChildExited",
        f"the job's process exited with status {exitcode} before reporting a result",
    )


def run_in_child(slot: Slot, alias: str, memory_limit: int | None) -> Verdict:
    """Run ``slot``'s job in a forked child; enforce its timeout and cancel requests.

    Returns the verdict the child sent, or how it died. Raises JobTimeout or JobCancelled
    after killing the child.
    """
    context = get_context()
    parent_end, child_end = context.Pipe(duplex=False)
    process = context.Process(
        target=child_main,
        args=(
            child_end,
            job_fields(slot),
            slot.ctx.worker_id,
            alias,
            connections[alias].settings_dict["NAME"],
            memory_limit,
        ),
        name=f"pqjobs-job-{slot.job.id}",
        daemon=True,
    )
    slot.enter_handler()
    process.start()
    child_end.close()
    slot.process = process
    try:
        return _wait(slot, process, parent_end)
    finally:
        if process.is_alive():
            process.kill()
        process.join(5)
        parent_end.close()
        slot.process = None


def _wait(slot: Slot, process: Any, pipe: Connection) -> Verdict:
    while True:
        if pipe.poll(POLL_INTERVAL):
            try:
                report: Verdict = pipe.recv()
            except EOFError:
                process.join(5)
                return classify_exit(process.exitcode)
            return report
        if not process.is_alive():
            if pipe.poll(0):
                continue  # it reported, then exited: read the report first
            return classify_exit(process.exitcode)
        if slot.deadline is not None and time.monotonic() >= slot.deadline:
            process.kill()
            raise JobTimeout(
                f"job ran past its timeout of {slot.job.timeout_seconds} s; its process was killed"
            )
        if slot.ctx.cancelled:
            process.kill()
            raise JobCancelled(
                f"job {slot.job.id} was cancelled while running; its process was killed"
            )

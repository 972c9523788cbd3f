"""``run_jobs --processes N``: one command that uses every core of a host.

The supervisor forks N worker processes once Django is set up (each runs a whole worker:
its own threads, connections and worker id), restarts one that dies (after a backoff that
grows while children keep dying young), and on SIGTERM / SIGINT passes the signal on to
every child, which stops gracefully as a lone worker would; a second signal is passed on
too, and the children exit at once. With ``--burst`` a child that drained the queue and
exited 0 is not replaced; the supervisor exits when every child has, with the worst code.

Each child runs in a process group of its own, so a Ctrl-C at the terminal reaches only
the supervisor, which passes it on once (a child that got it from both would take it as
the second signal and exit at once). A child whose supervisor is killed outright stops
gracefully by itself within a second or so.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from types import FrameType

from django.db import connections

from ..policies import DelaySequence

logger = logging.getLogger("django_pqjobs")

# Waits before restarting a child that died, by how many died young in a row; a child that
# ran for RESTART_RESET seconds counts as healthy again.
RESTART_DELAYS = DelaySequence((1.0, 2.0, 5.0, 10.0, 30.0))
RESTART_RESET = 60.0
ORPHAN_CHECK = 1.0  # how often a child looks whether its supervisor is still there


class Supervisor:
    """Runs ``run_child(n)`` in ``processes`` forked children (n = 1..processes); the
    function returns the child's exit code."""

    def __init__(
        self,
        processes: int,
        run_child: Callable[[int], int],
        *,
        burst: bool = False,
        shutdown_timeout: float = 30.0,
    ) -> None:
        self.processes = processes
        self.run_child = run_child
        self.burst = burst
        self.shutdown_timeout = shutdown_timeout
        self.children: dict[int, tuple[int, float]] = {}  # pid -> (n, started at)
        self._signals: list[int] = []
        self._restarts: dict[int, float] = {}  # n -> when to start it again
        self._died_young = 0
        self._worst = 0

    def run(self) -> int:
        """Start the children and watch them until they are all gone; the worst exit code."""
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)
        for n in range(1, self.processes + 1):
            self._start(n)
        stop_deadline: float | None = None
        passed_on = 0
        while self.children or (self._restarts and stop_deadline is None):
            if len(self._signals) > passed_on:
                signum = self._signals[passed_on]
                passed_on += 1
                if stop_deadline is None:
                    stop_deadline = time.monotonic() + self.shutdown_timeout + 10.0
                    self._restarts.clear()
                self._pass_on(signum)
            if stop_deadline is not None and time.monotonic() > stop_deadline:
                logger.error("worker processes still running past the grace period: killing them")
                self._pass_on(signal.SIGKILL)
                stop_deadline = time.monotonic() + 10.0
            for n, due in list(self._restarts.items()):
                if time.monotonic() >= due:
                    del self._restarts[n]
                    self._start(n)
            pid, status = _reap()
            if pid == 0:
                time.sleep(0.1)
                continue
            self._ended(pid, status, stopping=stop_deadline is not None)
        return self._worst

    def _start(self, n: int) -> None:
        # Forked children must not share the parent's database connections.
        connections.close_all()
        pid = os.fork()
        if pid == 0:  # the child
            code = 1
            try:
                os.setpgid(0, 0)
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
                signal.signal(signal.SIGINT, signal.default_int_handler)
                _stop_when_orphaned()
                code = self.run_child(n)
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else 1
            except BaseException:
                logger.exception("worker process %s failed", n)
            finally:
                logging.shutdown()
                os._exit(code)
        self.children[pid] = (n, time.monotonic())
        logger.info("started worker process %s of %s (pid %s)", n, self.processes, pid)

    def _ended(self, pid: int, status: int, *, stopping: bool) -> None:
        n, started = self.children.pop(pid)
        code = os.waitstatus_to_exitcode(status)
        how = f"exit code {code}" if code >= 0 else f"signal {signal.Signals(-code).name}"
        if stopping or (self.burst and code == 0):
            logger.info("worker process %s (pid %s) ended: %s", n, pid, how)
            self._worst = max(self._worst, code if code >= 0 else 1)
            return
        ran = time.monotonic() - started
        self._died_young = 0 if ran >= RESTART_RESET else self._died_young + 1
        wait = RESTART_DELAYS.delay(max(self._died_young - 1, 0))
        logger.warning(
            "worker process %s (pid %s) ended after %.0f s (%s); restarting it in %.0f s",
            n,
            pid,
            ran,
            how,
            wait,
        )
        self._restarts[n] = time.monotonic() + wait

    def _pass_on(self, signum: int) -> None:
        for pid in list(self.children):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signum)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self._signals.append(signum)
        name = signal.Signals(signum).name
        if len(self._signals) == 1:
            logger.warning(
                "%s received: stopping %s worker processes gracefully (up to %.0f s), "
                "send again to stop them at once",
                name,
                len(self.children),
                self.shutdown_timeout,
            )
        else:
            logger.warning("%s received again: the worker processes exit now", name)


def _stop_when_orphaned() -> None:
    """A child whose supervisor is gone (killed with SIGKILL: it could pass nothing on)
    stops gracefully, as on SIGTERM, instead of running on unwatched. Its own process group
    keeps it out of a signal sent to the supervisor's."""
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(ORPHAN_CHECK)
        logger.warning("the supervisor (pid %s) is gone: stopping this worker process", parent)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="pqjobs-supervisor-watch", daemon=True).start()


def _reap() -> tuple[int, int]:
    """A child that ended, without waiting: (pid, status), or (0, 0)."""
    try:
        return os.waitpid(-1, os.WNOHANG)
    except ChildProcessError:
        return 0, 0

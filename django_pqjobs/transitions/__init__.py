"""The job state machine: every statement that moves a job from one status to another.

    ready ──claim──► running ──complete──► done
      ▲                 │ ──end_attempt (attempts left)──► ready (run_after = now + backoff)
      │                 │ ──end_attempt (none left, or permanent)──► failed
      │                 │ ──end_attempt (cancel requested)──► cancelled
      ├──release────────┤   (shutdown, or its database connection died under the handler:
      │                 │    the attempt is given back, a bounded number of times in a row)
      ├──force_release──┤   (an operator's word: the attempt is given back, fenced;
      │                 │    one statement with release_unheld: give_back)
      ├──release_unheld─┤   (its worker is not running it: a failover lost its end;
      │                 │    the attempt is given back, fenced)
      └──rescue─────────┘   (worker stopped heartbeating: ready, or failed if none left)
    ready ──cancel──► cancelled        ready ──cancel_duplicates──► cancelled (dedupe replace)
    ready ──push_back──► ready (debounce: newest payload, due later)
    running ──let_go_of_key──► running (debounce: the next job takes the key)
    (enqueue, flow control holds it: its key or rate full, its queue paused) ──► blocked
                                                                 (sql/schema/flow.sql)
    ready ──claim (flow control holds it; hold_back: the claim asked for no job)──► blocked
    ready ──pause (its queue or type)──► blocked
    blocked ──promote_rate_blocked (new rate window) / resume──► ready
    blocked ──promote_limit_blocked (its key has room: a release missed)──► ready
    blocked ──[db] a slot of its key given back──► ready           (sql/schema/flow.sql)
    (enqueue with depends_on) ready ──make_wait──► waiting | ready | cancelled
    waiting ──[db] its last prerequisite done──► ready          (sql/schema/composition.sql)
    waiting ──[db] a prerequisite failed, cancelled or deleted──► cancelled (or ready, under
                   the "run" policy)                             (sql/schema/composition.sql)
    running ──park (a durable sleep or a wait for a signal; uncharged)──► waiting (parked)
    waiting (parked) ──wake_due (its time came) / wake_for_signal / end_wait──► ready
    waiting / ready / blocked ──expire_overdue (its deadline passed)──► expired
    failed ──skip──► cancelled (what halts on it, the rest of its sequence, goes on)
    failed / cancelled / expired ──requeue──► ready (attempt numbers go on; waiting again if it has
                                    unfinished prerequisites)
    ready ──run_now──► ready, first of its priority in the claim order
    ready ──raise_priority (waited a queue's PRIORITY_AGING "every")──► ready, priority + 1
    running ──cancel──► running with a cancel request (the handler sees it)
    any status but running ──delete_unless_running──► (deleted, with its history)

    Where a finished job is kept (its status unchanged; ``history``):
    done / failed / cancelled / expired ──shelve (HISTORY_AFTER later)──► the same, in the
                                    history partition of its status and days
    failed / cancelled / expired (shelved) ──unshelve (before Retry, Skip)──► the same, hot

[db]: taken by the database's triggers at the commit that causes it, so they follow every
path a job takes (worker, rescue, admin, SQL); they are written in ``sql/schema/``.

The modules, by concern: ``claim`` (ready → running, and → blocked), ``attempts`` (the end
of an attempt, release, rescue), ``operator`` (cancel, requeue, run now, force release,
delete, skip), ``deadlines`` (into expired), ``flow`` (out of blocked, pause and resume),
``dependencies`` (waiting), ``workflows`` (parked and woken), ``aging`` (a waiting job's
priority raised), ``history`` (finished jobs to their history partitions and back).
Transitions out of ``running`` are *fenced* on ``(id, locked_by, attempts)``, the
:class:`Fence` of the attempt: a worker that lost its job (rescued and claimed again
elsewhere) cannot overwrite the newer outcome. The database clock (``now()``) is the only
clock. Everyone changes statuses through these functions: the worker, the admin, the
management commands and the public operations.
"""

from .aging import raise_priority
from .attempts import (
    GIVE_BACK_LIMIT,
    NOT_RUN_BY_WORKER,
    REAPER_LOCK_KEY,
    SHUTDOWN,
    SHUTDOWN_NOTE,
    Claim,
    Completion,
    Rescued,
    Unheld,
    claims_of,
    complete,
    complete_many,
    end_attempt,
    mark_started,
    release,
    release_unheld,
    rescue_stale,
    save_progress,
)
from .claim import Claimed, claim, hold_back
from .deadlines import expire_overdue
from .dependencies import make_wait
from .fence import Fence
from .flow import (
    pause,
    promote_limit_blocked,
    promote_rate_blocked,
    release_unpaused,
    resume,
)
from .operator import (
    Cancelled,
    Deleted,
    MadeDue,
    Requeued,
    cancel,
    cancel_duplicates,
    cancel_many,
    delete_unless_running,
    force_release,
    let_go_of_key,
    push_back,
    requeue,
    requeue_many,
    run_now_many,
    skip_many,
)
from .workflows import end_wait, park, wake_due, wake_for_signal

__all__ = [
    "GIVE_BACK_LIMIT",
    "NOT_RUN_BY_WORKER",
    "REAPER_LOCK_KEY",
    "SHUTDOWN",
    "SHUTDOWN_NOTE",
    "Cancelled",
    "Claim",
    "Claimed",
    "Completion",
    "Deleted",
    "Fence",
    "MadeDue",
    "Requeued",
    "Rescued",
    "Unheld",
    "cancel",
    "cancel_duplicates",
    "cancel_many",
    "claim",
    "claims_of",
    "complete",
    "complete_many",
    "delete_unless_running",
    "end_attempt",
    "end_wait",
    "expire_overdue",
    "force_release",
    "hold_back",
    "let_go_of_key",
    "make_wait",
    "mark_started",
    "park",
    "pause",
    "promote_limit_blocked",
    "promote_rate_blocked",
    "push_back",
    "raise_priority",
    "release",
    "release_unheld",
    "release_unpaused",
    "requeue",
    "requeue_many",
    "rescue_stale",
    "resume",
    "run_now_many",
    "save_progress",
    "skip_many",
    "wake_due",
    "wake_for_signal",
]

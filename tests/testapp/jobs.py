"""Handlers used by the test suite (autodiscovered like any app's jobs module)."""

import asyncio
import dataclasses
import datetime
import enum
import gc
import math
import os
import time
import typing
import uuid
from decimal import Decimal

from django.db import connection, transaction
from django.db.models import F

from django_pqjobs import JobContext, PermanentError, Retry, Snooze, StepBackoff, job

from .models import Counter, Effect
from .typed_models import Invoice


# "t": the short type of the tests that look at jobs rather than at what they do (the
# admin, the state machine); enqueue_job refuses a type no handler is registered for.
@job("t")
@job("tests.noop")
def noop(ctx: JobContext) -> None:
    return None


@job("tests.debounced", debounce=0.4, debounce_max=1.2)
def debounced(ctx: JobContext) -> dict:
    """A type that declares debounce: its payload, as it was when it ran."""
    return {"echo": ctx.job.payload}


@job("tests.sequenced", sequence="account:{account}")
def sequenced(ctx: JobContext) -> dict:
    """One account's jobs run one at a time, in enqueue order: a sequence. Fails for good
    (PermanentError) while its attempt is at most ``fail_until`` of the payload, and sleeps
    ``sleep`` seconds first, so overlapping runs of one key would show in the timestamps."""
    time.sleep(ctx.job.payload.get("sleep", 0))
    if ctx.attempt <= ctx.job.payload.get("fail_until", 0):
        raise PermanentError(f"attempt {ctx.attempt} of {ctx.job.payload} fails")
    return {"n": ctx.job.payload.get("n")}


@job("tests.sequenced_continue", sequence="account:{account}", sequence_on_failure="continue")
def sequenced_continue(ctx: JobContext) -> dict:
    """A sequence that goes on past a failure."""
    return sequenced(ctx)


@job("tests.expiring", expires_in=0.5)
def expiring(ctx: JobContext) -> None:
    """Its jobs must start within half a second of being due."""


class Colour(enum.Enum):
    RED = "red"
    BLUE = "blue"


@dataclasses.dataclass
class Line:
    sku: str
    price: Decimal
    colour: Colour = Colour.RED


@dataclasses.dataclass
class Receipt:
    """Typed arguments: every kind of value the JSON form carries."""

    order_id: int
    email: str
    placed_at: datetime.datetime
    ships_on: datetime.date
    token: uuid.UUID
    lines: list[Line]
    tags: frozenset[str] = frozenset()
    note: str | None = None


@job("tests.typed_receipt")
def typed_receipt(ctx: JobContext, args: Receipt) -> dict:
    """Returns what it was given, as it saw it (types and values), to check the round trip."""
    assert isinstance(args, Receipt) and all(isinstance(line, Line) for line in args.lines)
    return {
        "order_id": args.order_id,
        "placed_at": args.placed_at.isoformat(),
        "ships_on": args.ships_on.isoformat(),
        "token": str(args.token),
        "total": str(sum(line.price for line in args.lines)),
        "colours": [line.colour.value for line in args.lines],
        "tags": sorted(args.tags),
        "types": [type(args.placed_at).__name__, type(args.lines[0].price).__name__],
    }


@dataclasses.dataclass
class Point:
    x: int
    y: int
    label: str = ""


@job("tests.typed_noop")
def typed_noop(ctx: JobContext, args: Point) -> None:
    """The typed arguments benchmark's no-op: the same payload as a dict job's."""


@job("tests.typed_invoice")
def typed_invoice(ctx: JobContext, args: Invoice) -> str:
    """Typed arguments as a pydantic model."""
    assert isinstance(args, Invoice) and isinstance(args.amount, Decimal)
    return f"{args.number}: {args.amount}"


@job("tests.encrypted_echo", encrypted=True)
def encrypted_echo(ctx: JobContext) -> dict:
    """Its payload and its result are encrypted at rest; the handler sees them in clear."""
    return {"echo": ctx.job.payload}


@job("tests.encrypted_point", encrypted=True)
def encrypted_point(ctx: JobContext, args: Point) -> int:
    """Typed arguments, encrypted at rest."""
    return args.x + args.y


@job("tests.encrypted_noop", encrypted=True)
def encrypted_noop(ctx: JobContext, args: Point) -> None:
    """The encrypted-jobs benchmark's typed no-op: typed_noop's payload, encrypted at rest."""


@job("tests.encrypted_dict_noop", encrypted=True)
def encrypted_dict_noop(ctx: JobContext) -> None:
    """The encrypted-jobs benchmark's no-op: tests.noop's dict payload, encrypted at rest."""


class Ping(typing.TypedDict):
    host: str
    port: int


@job("tests.typed_ping")
def typed_ping(ctx: JobContext, args: Ping) -> str:
    return f"{args['host']}:{args['port']}"


@job("tests.encrypted_fields", encrypted=["card_number", "cvv"])
def encrypted_fields(ctx: JobContext) -> dict:
    """Two fields encrypted at rest one by one; the rest of the payload stays readable (and
    of its result, the same fields)."""
    payload = ctx.job.payload
    return {"last4": payload.get("card_number", "")[-4:], "cvv": payload.get("cvv")}


def upgrade_shipment(payload: dict, version: int) -> dict:
    """Version 1 had ``zip``; 2 renamed it ``postcode``; 3 split ``name`` in two."""
    if version < 2:
        payload = {"name": payload["name"], "postcode": payload["zip"]}
    if version < 3:
        first, _, last = payload["name"].partition(" ")
        payload = {"first": first, "last": last, "postcode": payload["postcode"]}
    return payload


@dataclasses.dataclass
class Shipment:
    first: str
    last: str
    postcode: str


@job("tests.versioned_shipment", version=3, upgrade=upgrade_shipment)
def versioned_shipment(ctx: JobContext, args: Shipment) -> str:
    return f"{args.first} {args.last}, {args.postcode} (version {ctx.job.payload_version})"


@job("tests.versioned_without_upgrade", version=2)
def versioned_without_upgrade(ctx: JobContext) -> dict:
    return ctx.job.payload


def upgrade_that_breaks(payload: dict, version: int) -> dict:
    return {"total": payload["missing"]}


@job("tests.versioned_broken_upgrade", version=2, upgrade=upgrade_that_breaks)
def versioned_broken_upgrade(ctx: JobContext) -> dict:
    return ctx.job.payload


def upgrade_card(payload: dict, version: int) -> dict:
    """Version 1 stored the card number as text; an int() of a malformed one raises a
    ValueError that quotes it."""
    return {"x": int(payload["x"]), "y": payload["y"]}


@job("tests.encrypted_versioned", encrypted=True, version=2, upgrade=upgrade_card)
def encrypted_versioned(ctx: JobContext, args: Point) -> int:
    """An encrypted type whose payloads of version 1 are upgraded."""
    return args.x


def _count(key: str) -> int:
    """A side effect that counts its runs: Counter ``key`` + 1; returns the new count."""
    counter, _ = Counter.objects.get_or_create(name=key)
    Counter.objects.filter(pk=counter.pk).update(value=F("value") + 1)
    return Counter.objects.get(pk=counter.pk).value


def _maybe_die(ctx: JobContext, after: str) -> None:
    """Kill this worker process (as kill -9 would) right after the step ``after``, on the
    first attempt only (the payload's ``die_after``)."""
    if ctx.job.payload.get("die_after") == after and ctx.attempt == 1:
        os.kill(os.getpid(), 9)


@job("tests.workflow", max_attempts=5)
def workflow(ctx: JobContext) -> dict:
    """An order's workflow: charge, provision, a durable sleep, a wait for the customer's
    signal, then the e-mail; each step's side effect counted (Counter "<order>:<step>")."""
    order = ctx.job.payload["order"]
    charged = ctx.step("charge", _count, f"{order}:charge")
    _maybe_die(ctx, "charge")
    ctx.step("provision", _count, f"{order}:provision")
    _maybe_die(ctx, "provision")
    ctx.sleep("cool-off", ctx.job.payload.get("sleep", 3600))
    _maybe_die(ctx, "cool-off")
    reply = ctx.wait_for_signal("confirmed", timeout=ctx.job.payload.get("timeout"))
    _maybe_die(ctx, "confirmed")

    @ctx.step("email")
    def emailed() -> int:
        return _count(f"{order}:email")

    return {"charged": charged, "reply": reply, "emailed": emailed}


@job("tests.workflow_plain")
def workflow_plain(ctx: JobContext) -> dict:
    """A step, a short sleep and a signal, touching no table of its own (for roles without
    grants on the test app's tables)."""
    first = ctx.step("first", lambda: {"n": 1})
    ctx.sleep("nap", 0.5)
    return {"first": first, "reply": ctx.wait_for_signal("confirmed")}


@job("tests.workflow_noop5")
def workflow_noop5(ctx: JobContext) -> None:
    """The workflows benchmark's workflow: five no-op steps."""
    for n in range(5):
        ctx.step(f"step-{n}", int)


@job("tests.workflow_resumed_at")
def workflow_resumed_at(ctx: JobContext) -> float:
    """Waits for the signal "go"; returns when its handler resumed (epoch seconds): the
    signal-to-resume benchmark's probe."""
    ctx.wait_for_signal("go")
    return time.time()


@job("tests.workflow_parent")
def workflow_parent(ctx: JobContext) -> dict:
    """Runs two child jobs, one after the other: one that succeeds, one that fails."""
    from django_pqjobs import JobFailed

    echoed = ctx.run_child("echo", "tests.echo", {"n": 21})
    try:
        ctx.run_child("doomed", "tests.permanent", max_attempts=1)
        failed = None
    except JobFailed as exc:
        failed = {"type": exc.error_type, "error": exc.error, "job": exc.job_id, "says": str(exc)}
    return {"echoed": echoed, "failed": failed}


@job("tests.workflow_timeout")
def workflow_timeout(ctx: JobContext) -> str:
    """Waits for a signal that may not come; says which happened."""
    from django_pqjobs import SignalTimeout

    try:
        return f"got {ctx.wait_for_signal('answer', timeout=ctx.job.payload['timeout'])}"
    except SignalTimeout:
        return "timed out"


@job("tests.workflow_twice")
def workflow_twice(ctx: JobContext) -> None:
    ctx.step("same", int)
    ctx.step("same", int)


@job("tests.workflow_bad_result")
def workflow_bad_result(ctx: JobContext) -> None:
    ctx.step("bad", lambda: {1, 2})


@job("tests.workflow_atomic", atomic=True)
def workflow_atomic(ctx: JobContext) -> None:
    ctx.step("never", int)


@job("tests.workflow_isolated", isolation="process")
def workflow_isolated(ctx: JobContext) -> dict:
    """Steps and a sleep in a child process."""
    first = ctx.step("first", _count, f"iso-wf:{ctx.job.id}")
    ctx.sleep("nap", 3600)
    return {"first": first}


@job("tests.started_at")
def started_at(ctx: JobContext) -> float:
    """Returns when its handler started (epoch seconds): the latency benchmark's probe."""
    return time.time()


@job("tests.gc_frozen")
def gc_frozen(ctx: JobContext) -> int:
    """How many objects the worker process froze out of the garbage collector's reach."""
    return gc.get_freeze_count()


@job("tests.echo")
def echo(ctx: JobContext) -> dict:
    return {"echo": ctx.job.payload, "attempt": ctx.attempt, "worker": ctx.worker_id}


@job("tests.effect")
def effect(ctx: JobContext) -> None:
    """Records one Effect row per job; a second execution would violate the unique key."""
    Effect.objects.create(key=f"job:{ctx.job.id}", worker=ctx.worker_id)


@job("tests.fail", max_attempts=3, backoff=[10, 20])
def fail(ctx: JobContext) -> None:
    raise ValueError(f"boom on attempt {ctx.attempt}")


@job("tests.retry_then_ok", max_attempts=5)
def retry_then_ok(ctx: JobContext) -> dict:
    if ctx.attempt < ctx.job.payload.get("succeed_on", 2):
        raise Retry("not yet", delay=0)
    return {"attempt": ctx.attempt}


@job("tests.permanent")
def permanent(ctx: JobContext) -> None:
    raise PermanentError("this will never work")


@job("tests.sleep")
def sleep(ctx: JobContext) -> dict:
    """Sleeps in Python-level slices (interruptible), or in one C call with "blocking".

    With "report_start" the handler first records progress, so a test can tell a job an
    executor has started from one that is claimed (``running``) but not yet handed over.
    """
    seconds = float(ctx.job.payload.get("seconds", 1))
    if ctx.job.payload.get("report_start"):
        ctx.set_progress(0, message="started")
    if ctx.job.payload.get("blocking"):
        time.sleep(seconds)
    else:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            time.sleep(0.01)
    if ctx.job.payload.get("effect"):
        Effect.objects.create(key=f"job:{ctx.job.id}:{ctx.attempt}", worker=ctx.worker_id)
    return {"slept": seconds, "pid": os.getpid()}


@job("tests.busy", timeout=0.5)
def busy(ctx: JobContext) -> None:
    while True:
        pass


@job("tests.async_echo")
async def async_echo(ctx: JobContext) -> dict:
    await asyncio.sleep(0.01)
    return {"async": True, "payload": ctx.job.payload}


@job("tests.atomic_counter", atomic=True)
def atomic_counter(ctx: JobContext) -> dict:
    counter, _ = Counter.objects.get_or_create(name=ctx.job.payload.get("name", "atomic"))
    Counter.objects.filter(pk=counter.pk).update(value=F("value") + 1)
    if ctx.job.payload.get("fail"):
        raise ValueError("rolled back")
    return {"counter": counter.pk}


@job("tests.chain")
def chain(ctx: JobContext) -> dict:
    child = ctx.enqueue("tests.echo", {"from": ctx.job.id})
    return {"child": child}


@job("tests.unserializable_result")
def unserializable_result(ctx: JobContext) -> object:
    return object()


@job("tests.cooperative_cancel")
def cooperative_cancel(ctx: JobContext) -> None:
    end = time.monotonic() + 30
    while time.monotonic() < end:
        ctx.raise_if_cancelled()
        time.sleep(0.02)


@job("tests.progress")
def progress(ctx: JobContext) -> None:
    ctx.set_progress(5, 10, "halfway")


@job("tests.swallow_exceptions", timeout=0.3)
def swallow_exceptions(ctx: JobContext) -> str:
    """A handler whose ``except Exception`` must not swallow the timeout."""
    end = time.monotonic() + 10
    while time.monotonic() < end:
        try:  # noqa: SIM105 - the point is a bare except Exception
            time.sleep(0.01)
        except Exception:
            pass
    return "should have been interrupted"


@job("tests.transaction_user")
def transaction_user(ctx: JobContext) -> None:
    with transaction.atomic():
        Counter.objects.create(name=f"tx:{ctx.job.id}")


# --- process isolation -------------------------------------------------------------------


@job("tests.iso_echo", isolation="process")
def iso_echo(ctx: JobContext) -> dict:
    Effect.objects.create(key=f"iso:{ctx.job.id}:{ctx.attempt}", worker=str(os.getpid()))
    ctx.set_progress(1, 1, "done in child")
    return {"pid": os.getpid(), "payload": ctx.job.payload}


@job("tests.iso_raise", isolation="process", max_attempts=2, backoff=[0])
def iso_raise(ctx: JobContext) -> None:
    raise KeyError(f"missing on attempt {ctx.attempt}")


@job("tests.iso_retry", isolation="process")
def iso_retry(ctx: JobContext) -> dict:
    if ctx.attempt == 1:
        raise Retry("try again", delay=0)
    return {"attempt": ctx.attempt}


@job("tests.iso_permanent", isolation="process")
def iso_permanent(ctx: JobContext) -> None:
    raise PermanentError("never")


@job("tests.iso_segfault", isolation="process", max_attempts=1)
def iso_segfault(ctx: JobContext) -> None:
    import ctypes

    ctypes.string_at(0)


@job("tests.iso_exit", isolation="process", max_attempts=1)
def iso_exit(ctx: JobContext) -> None:
    os._exit(3)


@job("tests.iso_sigkill", isolation="process", max_attempts=1)
def iso_sigkill(ctx: JobContext) -> None:
    import signal

    os.kill(os.getpid(), signal.SIGKILL)


@job("tests.iso_memory", isolation="process", memory_limit="256M", max_attempts=1)
def iso_memory(ctx: JobContext) -> None:
    hog = bytearray(2 * 1024**3)
    hog[-1] = 1


@job("tests.iso_forever", isolation="process", timeout=1, max_attempts=2, backoff=[0])
def iso_forever(ctx: JobContext) -> None:
    while True:
        pass


@job("tests.iso_sleep", isolation="process")
def iso_sleep(ctx: JobContext) -> None:
    time.sleep(float(ctx.job.payload.get("seconds", 30)))


@job("tests.effect_idempotent")
def effect_idempotent(ctx: JobContext) -> None:
    """Like tests.effect, but safe to run twice (the at-least-once way to write a handler)."""
    Effect.objects.get_or_create(key=f"job:{ctx.job.id}", defaults={"worker": ctx.worker_id})


# --- bad data a handler can produce (hardening) ------------------------------------------


@job("tests.bad_output", max_attempts=1)
def bad_output(ctx: JobContext) -> object:
    """Returns, reports or raises something a database column cannot hold as given."""
    kind = ctx.job.payload["kind"]
    if kind == "nul_result":
        return {"text": "extracted from a pdf\x00with a NUL"}
    if kind == "surrogate_result":
        return {"text": "half a pair \udc80"}
    if kind == "huge_result":
        return {"blob": "x" * (2 * 1024 * 1024)}
    if kind == "nan_progress":
        ctx.set_progress(math.nan, 10)
    if kind == "nul_progress_message":
        ctx.set_progress(1, 2, "page\x00two")
        return {"ok": True}
    if kind == "nul_error":
        raise ValueError("could not parse 'abc\x00def'")
    if kind == "surrogate_error":
        raise ValueError("bad text \ud800 here")
    raise AssertionError(f"unknown kind {kind!r}")


@job("tests.iso_nul_error", isolation="process", max_attempts=1)
def iso_nul_error(ctx: JobContext) -> None:
    raise ValueError("child saw 'abc\x00def'")


@job("tests.effect_quick_retry", backoff=[0.2])
def effect_quick_retry(ctx: JobContext) -> None:
    """Safe to run twice; retried at once if the database was away mid-handler."""
    Effect.objects.get_or_create(key=f"job:{ctx.job.id}", defaults={"worker": ctx.worker_id})


# --- flow control --------------------------------------------------------------------------


@job("tests.limited", concurrency=1, concurrency_key="k:{k}", max_attempts=1)
def limited(ctx: JobContext) -> None:
    time.sleep(float(ctx.job.payload.get("seconds", 0.005)))


@job("tests.limited3", concurrency=3, concurrency_key="k:{k}", max_attempts=1)
def limited3(ctx: JobContext) -> None:
    time.sleep(float(ctx.job.payload.get("seconds", 0.005)))


@job("tests.per_user", concurrency=1, concurrency_key="tenant:{tenant}:user:{user}")
def per_user(ctx: JobContext) -> None:
    return None


@job("tests.rated", rate="20/s", max_attempts=1)
def rated(ctx: JobContext) -> None:
    return None


@job("tests.rated_limited", concurrency=1, rate="100/m", max_attempts=1)
def rated_limited(ctx: JobContext) -> None:
    return None


@job("tests.capped", concurrency=1, concurrency_key="k:{k}", max_waiting=2)
def capped(ctx: JobContext) -> None:
    return None


@job("tests.capped_skip", concurrency=1, max_waiting=1, when_waiting_full="skip")
def capped_skip(ctx: JobContext) -> None:
    return None


# --- retries after an outage ---------------------------------------------------------------


@job("tests.outage")
def outage(ctx: JobContext) -> None:
    """Fails as every job does while a dependency is down (default backoff)."""
    raise ConnectionError("the payment provider is down")


@job("tests.outage_exact_steps", backoff=StepBackoff(jitter=False))
def outage_exact_steps(ctx: JobContext) -> None:
    raise ConnectionError("the payment provider is down")


@job("tests.replaceable", dedupe="replace")
def replaceable(ctx: JobContext) -> None:
    """A job type whose duplicates replace each other unless the caller says otherwise."""


@job("tests.batch_callback")
def batch_callback(ctx: JobContext) -> dict:
    """A batch's callback: one Effect row per run (a second run of one callback job would
    violate the unique key), and the batch's counts as its result."""
    batch = ctx.batch
    assert batch is not None
    Effect.objects.create(key=f"callback:{batch.id}:{ctx.job.id}", worker=ctx.worker_id)
    return {
        "batch": batch.id,
        "total": batch.total,
        "done": batch.done,
        "failed": batch.failed,
        "cancelled": batch.cancelled,
        "payload": ctx.job.payload,
    }


@job("tests.dependency_results")
def dependency_results(ctx: JobContext) -> dict:
    """The results of its dependencies, by id (as text: JSON object keys)."""
    return {str(job_id): result for job_id, result in ctx.dependency_results().items()}


@job("tests.batch_counts")
def batch_counts(ctx: JobContext) -> dict:
    """A batch's callback that touches no table of the test app: the batch's counts."""
    batch = ctx.batch
    assert batch is not None
    return {"batch": batch.id, "done": batch.done, "failed": batch.failed}


# --- the trust boundary: infrastructure errors and absurd delays ---------------------------


@job("tests.lose_connection", max_attempts=1)
def lose_connection(ctx: JobContext) -> dict:
    """Its database connection dies under it (as in a restart) on the first ``lose`` runs
    (counted by Effect rows, written before the connection is cut), then it succeeds."""
    runs = Effect.objects.filter(key__startswith=f"lost:{ctx.job.id}:").count()
    if runs < ctx.job.payload["lose"]:
        Effect.objects.create(key=f"lost:{ctx.job.id}:{runs}", worker=ctx.worker_id)
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_terminate_backend(pg_backend_pid())")
    return {"runs": runs + 1}


@job("tests.retry_in_forever", max_attempts=3, backoff=[0.05])
def retry_in_forever(ctx: JobContext) -> None:
    raise Retry("later", delay=1e13)


@job("tests.bad_backoff", max_attempts=2, backoff=lambda attempt: 1e13)
def bad_backoff(ctx: JobContext) -> None:
    raise ValueError("boom")


@job("tests.what_it_sees", concurrency=4, concurrency_key="k:{k}")
def what_it_sees(ctx: JobContext) -> dict:
    """Everything its context says about the job, whichever way it runs."""
    from django_pqjobs.models import Job

    batch = ctx.batch
    return {
        "pid": os.getpid(),
        "batch": None if batch is None else batch.id,
        "dependencies": {str(k): v for k, v in ctx.dependency_results().items()},
        "job": {f.attname: str(getattr(ctx.job, f.attname)) for f in Job._meta.concrete_fields},
    }


def _snoozes_so_far(ctx: JobContext) -> int:
    from django_pqjobs.models import JobAttempt

    return JobAttempt.objects.filter(job_id=ctx.job.id, outcome="snoozed").count()


# max_attempts=1: a snooze that counted would fail the job at once
@job("tests.snooze_until", max_attempts=1)
def snooze_until(ctx: JobContext) -> dict:
    """Snoozes (payload ``delay``, default 0) until it has snoozed ``times`` times."""
    snoozed = _snoozes_so_far(ctx)
    if snoozed < ctx.job.payload["times"]:
        raise Snooze(ctx.job.payload.get("delay", 0), reason=f"not yet ({snoozed})")
    return {"snoozed": snoozed, "attempts": ctx.job.attempts}


@job("tests.iso_snooze_once", isolation="process", max_attempts=1)
def iso_snooze_once(ctx: JobContext) -> dict:
    if not _snoozes_so_far(ctx):
        raise Snooze(0)
    return {"pid": os.getpid()}


@job("tests.snooze_badly", max_attempts=1)
def snooze_badly(ctx: JobContext) -> None:
    raise Snooze(ctx.job.payload["delay"])


@job("tests.snooze_odd_reason", max_attempts=1)
def snooze_odd_reason(ctx: JobContext) -> str:
    """Snoozes once with a reason no column takes as it is: NUL, a lone surrogate, 12 MB."""
    if not _snoozes_so_far(ctx):
        raise Snooze(0, reason="x" * 12_000_000 + " not\x00yet \ud800")
    return "ok"


@job("tests.fair_noop", fair_key="tenant:{tenant}")
def fair_noop(ctx: JobContext) -> None:
    """Fair claiming's job: shared out by tenant (``{"tenant": ..., "n": ...}``)."""

"""Fair claiming (issue 29): among due jobs of equal priority, workers take fair keys in
weighted turns (``@job(fair_key=...)``), so a key with a large backlog does not hold up a key
with a few jobs; jobs without a fair key are claimed by age as before."""

from __future__ import annotations

import collections
import re
from datetime import timedelta

import pytest
from django.db import DatabaseError, connection
from django.utils import timezone

from django_pqjobs import InvalidJobOption, enqueue_job, enqueue_many, job
from django_pqjobs.admin.dashboard import fair_shared
from django_pqjobs.models import FairWeight, Job
from django_pqjobs.registry import registry
from django_pqjobs.testing import drain
from tests.helpers import planned_inside, run_jobs, wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def claim(limit: int, scan: int | None = None) -> list[tuple[int, str | None]]:
    """One claim, as a worker makes it: (id, fair key) in the order the claim took them."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT id, fair_key FROM pqjobs_claim('test-worker', %s, NULL, NULL, %s)",
            [limit, scan],
        )
        rows = cursor.fetchall()
    return [(int(job_id), key) for job_id, key in rows if job_id is not None]


def keys_of(rows: list[tuple[int, str | None]]) -> collections.Counter[str | None]:
    return collections.Counter(key for _, key in rows)


def tenants(name: str, count: int) -> list[dict]:
    return [{"tenant": name, "n": n} for n in range(count)]


def test_a_key_with_a_backlog_does_not_hold_up_a_key_with_a_few_jobs():
    enqueue_many("tests.fair_noop", tenants("big", 2000))
    enqueue_many("tests.fair_noop", tenants("small", 10))
    # turns: big 1, 2, 3 ...; small, new, from the head: 2, 3 ... (ties by id)
    assert keys_of(claim(21)) == {"tenant:big": 11, "tenant:small": 10}


def test_a_new_key_starts_at_the_head_of_the_line_and_an_idle_key_saves_no_turns():
    enqueue_many("tests.fair_noop", tenants("big", 300))
    assert keys_of(claim(100)) == {"tenant:big": 100}
    # "late" arrives after 100 of big's turns were taken: it starts at the head, where the
    # line is now, not behind big's backlog nor (having waited) ahead of all of it
    enqueue_many("tests.fair_noop", tenants("late", 50))
    taken = keys_of(claim(40))
    assert taken["tenant:late"] >= 19 and taken["tenant:big"] <= 21, taken


def test_weights_share_out_turns_within_ten_percent():
    FairWeight.objects.create(key="tenant:gold", weight=3)
    enqueue_many("tests.fair_noop", tenants("gold", 3000))
    enqueue_many("tests.fair_noop", tenants("basic", 3000))
    taken: list[tuple[int, str | None]] = []
    for _ in range(10):
        taken += claim(100)
    counts = keys_of(taken)
    assert sum(counts.values()) == 1000
    assert counts["tenant:gold"] == pytest.approx(750, rel=0.10)
    assert counts["tenant:basic"] == pytest.approx(250, rel=0.10)


def test_a_weight_applies_to_jobs_enqueued_after_it():
    enqueue_many("tests.fair_noop", tenants("a", 100) + tenants("b", 100))
    FairWeight.objects.create(key="tenant:a", weight=4)
    turns = dict(
        Job.objects.filter(payload__n=0).values_list("fair_key", "fair_turn")  # type: ignore[arg-type]
    )
    # new to the line in one statement, both keys start one turn after its head (none: 0)
    assert turns == {"tenant:a": 1.0, "tenant:b": 1.0}
    new = enqueue_job("tests.fair_noop", {"tenant": "a", "n": 100})
    assert Job.objects.get(pk=new).fair_turn == pytest.approx(100.25)


def test_jobs_without_a_fair_key_keep_their_place_by_age():
    older = enqueue_job("tests.noop")
    enqueue_many("tests.fair_noop", tenants("a", 5))
    younger = enqueue_job("tests.noop")
    order = [job_id for job_id, _ in claim(3)]
    assert order[0] == older and younger not in order
    assert Job.objects.get(pk=older).fair_turn is None


def test_priority_comes_before_turns():
    enqueue_many("tests.fair_noop", tenants("a", 5))
    urgent = enqueue_job("tests.noop", priority=10)
    urgent_fair = enqueue_job("tests.fair_noop", {"tenant": "b"}, priority=10)
    assert {job_id for job_id, _ in claim(2)} == {urgent, urgent_fair}


def test_the_claim_clears_the_turn_so_a_retry_goes_by_age():
    first = enqueue_job("tests.fair_noop", {"tenant": "a"})
    assert Job.objects.get(pk=first).fair_turn == 1.0
    assert claim(1) == [(first, "tenant:a")]
    claimed = Job.objects.get(pk=first)
    assert (claimed.status, claimed.fair_turn, claimed.fair_key) == ("running", None, "tenant:a")


def test_a_delayed_job_gets_no_turn_and_waits_by_age():
    later = enqueue_job("tests.fair_noop", {"tenant": "a"}, delay=60)
    assert Job.objects.get(pk=later).fair_turn is None


def test_a_literal_key_per_call_and_per_enqueue_many():
    one = enqueue_job("tests.noop", fair_key="import:7")
    many = enqueue_many("tests.noop", [{}, {}], fair_key="import:8")
    keys = dict(Job.objects.filter(pk__in=[one, *many]).values_list("pk", "fair_key"))
    assert keys == {one: "import:7", many[0]: "import:8", many[1]: "import:8"}
    assert set(Job.objects.values_list("fair_turn", flat=True)) == {1.0, 2.0, 3.0}


def test_the_flow_control_claim_keeps_the_turns():
    """Jobs with a concurrency key take the full claim; it numbers them in turn order."""

    @job("tests.fair_limited", fair_key="tenant:{tenant}", concurrency=100, concurrency_key="all")
    def fair_limited(ctx):
        return None

    try:
        enqueue_many("tests.fair_limited", tenants("big", 200))
        enqueue_many("tests.fair_limited", tenants("small", 5))
        assert keys_of(claim(11)) == {"tenant:big": 6, "tenant:small": 5}
    finally:
        registry.unregister("tests.fair_limited")


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("", "1-255 characters, got ''"),
        ("a\x00b", "NUL"),
        ("x" * 300, "1-255 characters"),
        (7, "got 7"),
    ],
)
def test_a_bad_fair_key_is_refused_by_name(value, problem):
    with pytest.raises(InvalidJobOption, match="fair_key") as caught:
        enqueue_job("tests.noop", fair_key=value)
    assert problem in str(caught.value)
    assert not Job.objects.exists()


def test_a_template_that_cannot_be_filled_is_refused_by_name():
    with pytest.raises(InvalidJobOption, match="fair_key"):
        enqueue_job("tests.fair_noop", {"n": 1})  # no "tenant" field
    with pytest.raises(InvalidJobOption, match="fair_key"):

        @job("tests.fair_bad", fair_key="tenant:{")
        def fair_bad(ctx):
            return None

    assert not Job.objects.exists()


def test_a_queue_s_fair_key_applies_to_every_job_enqueued_to_it(settings):
    settings.PQJOBS = {
        **settings.PQJOBS,
        "FAIR_QUEUES": {"imports": "tenant:{tenant}", "calls": lambda p: f"caller:{p['from']}"},
    }

    @job("tests.org_fair", fair_key="org:{tenant}")
    def org_fair(ctx):
        return None

    try:
        one = enqueue_job("tests.noop", {"tenant": 3}, queue="imports")
        many = enqueue_many("tests.noop", [{"tenant": 1}, {"tenant": "b"}], queue="imports")
        given = enqueue_job("tests.noop", {"tenant": 3}, queue="imports", fair_key="x")
        own = enqueue_job("tests.org_fair", {"tenant": 3}, queue="imports")  # its type's
        called = enqueue_job("tests.noop", {"from": "alice"}, queue="calls")
        elsewhere = enqueue_job("tests.noop", {"tenant": 3})
        keys = dict(Job.objects.values_list("pk", "fair_key"))
        assert keys == {
            one: "tenant:3",
            many[0]: "tenant:1",
            many[1]: "tenant:b",
            given: "x",
            own: "org:3",
            called: "caller:alice",
            elsewhere: None,
        }
        assert Job.objects.filter(fair_key__isnull=False, fair_turn__isnull=True).count() == 0
        with pytest.raises(InvalidJobOption, match=r"PQJOBS\['FAIR_QUEUES'\]\['imports'\]"):
            enqueue_job("tests.noop", {"n": 1}, queue="imports")  # no "tenant" field
        with pytest.raises(InvalidJobOption, match="FAIR_QUEUES"):
            enqueue_many("tests.noop", [{"tenant": 1}, {"n": 2}], queue="imports")
        assert Job.objects.count() == 7
        shared = {row["queue"]: row["declared_by"] for row in fair_shared({})}
        assert shared["imports"] == ["PQJOBS['FAIR_QUEUES']"]
        assert shared["calls"] == ["PQJOBS['FAIR_QUEUES']"]
    finally:
        registry.unregister("tests.org_fair")


def test_sql_callers_pass_a_fair_key_and_bad_ones_are_refused():
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pqjobs_enqueue('tests.noop', 'default', '{}', 0, 1, NULL, 0, NULL, NULL, "
            "NULL, NULL, NULL, p_fair_key => 'tenant:sql')"
        )
        (job_id,) = cursor.fetchone()
    assert Job.objects.filter(pk=job_id, fair_key="tenant:sql", fair_turn=1.0).exists()
    for bad in ("", "a\x01"):
        with (
            pytest.raises(DatabaseError, match="fair_key") as caught,
            connection.cursor() as cursor,
        ):
            cursor.execute(
                "SELECT pqjobs_enqueue('tests.noop', 'default', '{}', 0, 1, NULL, 0, NULL, "
                "NULL, NULL, NULL, NULL, p_fair_key => %s)",
                [bad],
            )
        assert caught.value.__cause__.sqlstate == "22023"


def test_drain_runs_fair_jobs_in_turns():
    enqueue_many("tests.fair_noop", tenants("big", 30))
    enqueue_many("tests.fair_noop", tenants("small", 3))
    ran = [run.job_id for run in drain()]
    small = set(Job.objects.filter(fair_key="tenant:small").values_list("pk", flat=True))
    assert max(ran.index(job_id) for job_id in small) < 8


def test_a_small_tenant_is_claimed_before_the_large_tenants_200th_job_under_four_workers():
    """The documented bound (docs/guides/fair-claiming.md): 20 jobs of a tenant enqueued
    behind 20,000 of another are all claimed before the large tenant's 200th, by a real
    worker of 4 threads. Claims, not finishes: jobs of one claim share its ``locked_at``,
    and when each one's handler ends is up to the threads (on a busy machine a thread
    running a small job can wait while the other three finish a few hundred)."""
    enqueue_many("tests.fair_noop", tenants("big", 20_000))
    enqueue_many("tests.fair_noop", tenants("small", 20))
    small = Job.objects.filter(fair_key="tenant:small")
    with run_jobs("--concurrency", "4"):
        wait_for(lambda: not small.exclude(status="done").exists())
    last_small = max(small.values_list("locked_at", flat=True))
    big_before = Job.objects.filter(fair_key="tenant:big", locked_at__lt=last_small).count()
    assert big_before < 200, big_before


def test_a_retried_job_takes_its_place_by_age():
    first = enqueue_job("tests.fair_noop", {"tenant": "a"})
    claim(1)
    Job.objects.filter(pk=first).update(
        status="ready", run_after=timezone.now() - timedelta(seconds=1)
    )
    enqueue_many("tests.fair_noop", tenants("b", 5))
    assert claim(1) == [(first, "tenant:a")]  # the oldest: it waited longer than b's turns


def test_the_turn_is_found_through_the_indexes_whatever_the_statistics():
    """The turn's lookups are often planned while the table is empty; then one
    enqueue_many may insert 100,000 rows. A plan that read the table would make that
    insert quadratic (it did: 20 minutes for 100,000 rows), so they read their indexes.
    enqueue_many asks for its keys' start once per statement, never once per row (a call
    and three lookups per row made 100,000 fair jobs 2.5 times as slow as plain ones)."""
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE pqjobs_job")  # empty, as a new project's table is
    enqueue_many("tests.fair_noop", tenants("b", 3))  # a line to start behind
    plans = planned_inside(lambda: enqueue_many("tests.fair_noop", tenants("a", 200)))
    lookups = [plan for plan in plans if "j.priority = p_priority" in plan]
    assert len(lookups) == 1, len(lookups)  # one per statement
    # both of its lookups through an index of turns (which one is the server's choice:
    # PostgreSQL 18's skip scan may take pqjobs_job_fair_claim for the key's own)
    through = re.findall(r"using (pqjobs_job_fair_(?:key|claim)) on pqjobs_job", lookups[0])
    assert len(through) >= 2, lookups[0]
    assert "Seq Scan on pqjobs_job" not in lookups[0], lookups[0]
    assert not [plan for plan in plans if "NEW.fair_key" in plan]  # no row trigger call
    turns = Job.objects.filter(fair_key="tenant:a").order_by("id").values_list("fair_turn")
    assert [turn for (turn,) in turns] == [2.0 + n for n in range(200)]
    assert Job.objects.filter(fair_key="tenant:a").count() == 200


@pytest.mark.parametrize("renamed", ["pqjobs_job_aa_fair_turn", "pqjobs_job_zz_fair_turn"])
def test_the_turn_does_not_depend_on_the_order_of_the_insert_triggers(renamed):
    """BEFORE INSERT row triggers fire in name order; the turn's is renamed to fire before
    pqjobs_job_admit, then after pqjobs_job_paused_at_enqueue: the rows come out the same
    (a fair job is never held by its key at enqueue, and one held by a pause keeps its
    turn)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO pqjobs_pause (kind, name, paused_at) VALUES ('queue', 'held', now())"
        )
        cursor.execute(f"ALTER TRIGGER pqjobs_job_fair_turn ON pqjobs_job_hot RENAME TO {renamed}")
        try:
            cursor.execute(
                "INSERT INTO pqjobs_job (job_type, queue, payload, status, attempts, "
                "max_attempts, fair_key, concurrency_key, concurrency_limit) VALUES "
                "('t', 'default', '{}', 'ready', 0, 1, 'k', 'c', 1), "
                "('t', 'held', '{}', 'ready', 0, 1, 'k', NULL, NULL), "
                "('t', 'held', '{}', 'ready', 0, 1, 'k', 'c', 1) "
                "RETURNING status, blocked_by, fair_turn"
            )
            rows = cursor.fetchall()
        finally:
            cursor.execute(
                f"ALTER TRIGGER {renamed} ON pqjobs_job_hot RENAME TO pqjobs_job_fair_turn"
            )
    assert rows == [("ready", None, 1.0), ("blocked", "paused", 2.0), ("blocked", "paused", 2.0)]

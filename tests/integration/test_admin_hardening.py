"""The operator console against bad data and hostile URLs (issue 12, findings 8-13).

Each test reproduces one finding as it was reported; the URL-cost findings are also
replayed on a table of a million jobs in test_admin_scale.py.
"""

from __future__ import annotations

import html
import json
import re
import time
from collections.abc import Iterator

import psycopg
import pytest
from django.contrib.auth.models import Permission, User
from django.contrib.messages import get_messages
from django.db import connection, connections, transaction
from django.db.models import QuerySet
from django.db.models.signals import pre_save
from django.test import Client, override_settings
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from django_pqjobs import enqueue_job
from django_pqjobs.admin.changelist import statement_timeout
from django_pqjobs.admin.excerpts import SHOWN_ATTEMPTS, SHOWN_CHARS
from django_pqjobs.admin.jobs import JobAdmin
from django_pqjobs.models import Job, JobAttempt, Schedule
from django_pqjobs.worker.claiming import claim_jobs
from tests.helpers import bound

pytestmark = pytest.mark.django_db(transaction=True)

CHANGELIST = reverse("admin:django_pqjobs_job_changelist")
SCHEDULES = reverse("admin:django_pqjobs_schedule_changelist")
ADD_SCHEDULE = reverse("admin:django_pqjobs_schedule_add")
SECRET = "patient-4711-diagnosis"


def change_url(job_id: int) -> str:
    return reverse("admin:django_pqjobs_job_change", args=[job_id])


def schedule_url(schedule_id: int) -> str:
    return reverse("admin:django_pqjobs_schedule_change", args=[schedule_id])


def make_user(name: str, *perms: str) -> Client:
    user = User.objects.create_user(name, password="pw", is_staff=True)
    for codename in perms:
        user.user_permissions.add(Permission.objects.get(codename=codename))
    client = Client(raise_request_exception=False)
    client.force_login(user)
    return client


@pytest.fixture
def operator() -> Client:
    return make_user(
        "operator",
        "view_job",
        "change_job",
        "add_job",  # deciding what a schedule runs is enqueueing
        "view_schedule",
        "add_schedule",
        "change_schedule",
    )


@pytest.fixture
def viewer() -> Client:
    return make_user("viewer", "view_job", "view_schedule")


def messages_of(response) -> list[str]:
    return [str(m) for m in get_messages(response.wsgi_request)]


def writes_to(table: str, captured: CaptureQueriesContext) -> list[str]:
    return [
        q["sql"]
        for q in captured.captured_queries
        if table in q["sql"] and q["sql"].lstrip().upper().startswith(("UPDATE", "INSERT"))
    ]


# --- 8: the read-only job page accepted POST and wrote the whole row back ------------------


def test_job_page_refuses_post_and_never_writes_the_row(operator):
    job_id = enqueue_job("t", {"n": 1})
    claim_jobs("default", "worker-1", None, 1)
    before = Job.objects.get(pk=job_id)
    saved = []

    def worker_finishes_meanwhile(sender, instance, **kwargs):
        # Between the page's read of the row and its write, the worker records success:
        # a save would then put 'running' and an empty result back over it.
        saved.append(instance.pk)
        Job.objects.filter(pk=instance.pk).update(status="done", result={"rows": 3})

    pre_save.connect(worker_finishes_meanwhile, sender=Job)
    try:
        with CaptureQueriesContext(connection) as captured:
            response = operator.post(change_url(job_id), {"_save": "Save"})
    finally:
        pre_save.disconnect(worker_finishes_meanwhile, sender=Job)
    assert response.status_code == 405
    assert b"read-only" in response.content
    assert saved == [] and writes_to("pqjobs_job", captured) == []
    after = Job.objects.get(pk=job_id)
    assert (after.status, after.result, after.updated_at) == ("running", None, before.updated_at)
    assert operator.get(change_url(job_id)).status_code == 200  # reading still works


def test_the_job_list_offers_not_djangos_bulk_delete(admin_client):
    # Its confirmation lists every selected job and it deletes running ones; the job list's
    # own bulk delete (test_admin_operator.py) counts instead and keeps running jobs.
    ids = [enqueue_job("t") for _ in range(3)]
    assert "delete_selected" not in admin_client.get(CHANGELIST).content.decode()
    admin_client.post(
        CHANGELIST, {"action": "delete_selected", "select_across": "1", "_selected_action": ids}
    )
    assert Job.objects.count() == 3


# --- 9: the schedule form took any job type and any payload ---------------------------------


def schedule_form(**overrides: object) -> dict[str, object]:
    data: dict[str, object] = {
        "name": "nightly",
        "job_type": "tests.noop",
        "cron": "0 3 * * *",
        "interval_seconds": "",
        "timezone": "UTC",
        "payload": "{}",
        "queue": "",
        "priority": "",
        "enabled": "on",
        "overlap": "skip",
        "misfire": "run_once",
    }
    data.update(overrides)
    return data


def test_schedule_form_saves_a_registered_job_type_with_a_valid_payload(operator):
    response = operator.post(ADD_SCHEDULE, schedule_form(payload='{"k": [1, 2]}', priority="5"))
    assert response.status_code == 302, response.content.decode()[:2000]
    schedule = Schedule.objects.get(name="nightly")
    assert (schedule.job_type, schedule.payload, schedule.priority) == (
        "tests.noop",
        {"k": [1, 2]},
        5,
    )
    page = operator.get(ADD_SCHEDULE).content.decode()
    assert '<option value="tests.noop">' in page  # the registered types are suggested


@pytest.mark.parametrize(
    "field, value, error",
    [
        ("job_type", "no.such.type", "No handler is registered for job type 'no.such.type'"),
        ("payload", json.dumps({"blob": "x" * 600_000}), "over the limit of 262144 bytes"),
        ("payload", '{"text": "a\\u0000b"}', "NUL character"),
        ("payload", '"\\ud800"', "lone surrogate"),
        ("payload", "[" * 5000 + "]" * 5000, "nests too deeply"),
        ("payload", "1" * 5000, "too many digits"),
        ("payload", "[" * 150 + "]" * 150, "more than 100 levels deep"),
        ("queue", "emails\x1b[31m", "control characters"),
        ("priority", str(-(2**31)), "priority must be between"),
        ("name", "a\tb", "control characters"),
    ],
)
def test_schedule_form_refuses_what_enqueue_job_refuses(operator, field, value, error):
    response = operator.post(ADD_SCHEDULE, schedule_form(**{field: value}))
    assert response.status_code == 200  # the form again, with the error
    page = html.unescape(response.content.decode())
    assert error in page
    assert not Schedule.objects.exists()


def test_run_now_of_a_schedule_broken_outside_the_form_says_why(operator):
    big = Schedule.objects.create(
        name="big", job_type="tests.noop", cron="0 3 * * *", payload={"blob": "x" * 600_000}
    )
    response = operator.post(
        SCHEDULES, {"action": "run_now", "_selected_action": [big.pk]}, follow=True
    )
    assert response.status_code == 200
    [message] = messages_of(response)
    assert message.startswith("schedule 'big': not run:") and "262144" in message
    assert not Job.objects.exists()


# --- a schedule cannot be used to run what its user may not enqueue ------------------------


@pytest.fixture
def schedule_editor() -> Client:
    """May change schedules (timing, enable, disable), not add jobs."""
    return make_user("editor", "view_job", "view_schedule", "add_schedule", "change_schedule")


def test_without_the_enqueue_permission_a_schedule_cannot_be_retargeted(schedule_editor):
    schedule = Schedule.objects.create(
        name="nightly", job_type="tests.noop", interval_seconds=3600, payload={"a": 1}
    )
    page = schedule_editor.get(schedule_url(schedule.pk)).content.decode()
    assert re.search(r'<input[^>]*name="job_type"[^>]*disabled', page)
    retarget = schedule_form(
        job_type="tests.echo", payload='{"order_id": 1}', queue="emails", priority="99", cron=""
    )
    retarget["interval_seconds"] = "60"  # the timing is theirs to change
    response = schedule_editor.post(schedule_url(schedule.pk), retarget)  # crafted by hand
    assert response.status_code == 200
    assert "changing what a schedule runs (job_type, payload, queue, priority) needs" in (
        html.unescape(response.content.decode())
    )
    schedule.refresh_from_db()
    assert schedule.interval_seconds == 3600  # nothing of it saved
    # what a browser sends (no disabled field): the timing alone, saved
    timing = {
        k: v for k, v in retarget.items() if k not in ("job_type", "payload", "queue", "priority")
    }
    response = schedule_editor.post(schedule_url(schedule.pk), timing)
    assert response.status_code == 302, response.content.decode()[:2000]
    schedule.refresh_from_db()
    assert (schedule.job_type, schedule.payload, schedule.queue, schedule.priority) == (
        "tests.noop",
        {"a": 1},
        "",
        None,
    )
    assert schedule.interval_seconds == 60
    # creating one is deciding what runs too; so is Run now
    assert schedule_editor.get(ADD_SCHEDULE).status_code == 403
    assert schedule_editor.post(ADD_SCHEDULE, schedule_form(name="other")).status_code == 403
    run_now = {"action": "run_now", "_selected_action": [schedule.pk]}
    schedule_editor.post(SCHEDULES, run_now, follow=True)
    assert not Schedule.objects.filter(name="other").exists()
    assert not Job.objects.exists()
    # enabling and disabling stays theirs
    disable = {"action": "disable_schedules", "_selected_action": [schedule.pk]}
    schedule_editor.post(SCHEDULES, disable, follow=True)
    assert not Schedule.objects.get(pk=schedule.pk).enabled


def test_with_the_enqueue_permission_a_schedule_is_retargeted_and_run(operator):
    schedule = Schedule.objects.create(
        name="nightly", job_type="tests.noop", interval_seconds=3600, payload={"a": 1}
    )
    retarget = schedule_form(job_type="tests.echo", payload='{"order_id": 1}', cron="")
    retarget["interval_seconds"] = "3600"
    response = operator.post(schedule_url(schedule.pk), retarget)
    assert response.status_code == 302, response.content.decode()[:2000]
    schedule.refresh_from_db()
    assert (schedule.job_type, schedule.payload) == ("tests.echo", {"order_id": 1})
    operator.post(SCHEDULES, {"action": "run_now", "_selected_action": [schedule.pk]})
    assert Job.objects.get(schedule_id=schedule.pk).job_type == "tests.echo"


# --- 10: job data shown to every viewer; any lookup taken from the URL ----------------------


def job_with_data() -> int:
    job_id = enqueue_job("t", {"patient": SECRET})
    Job.objects.filter(pk=job_id).update(
        status="failed",
        result={"diagnosis": SECRET},
        last_error=f"ValueError: bad record {SECRET}",
        error_type="ValueError",
        progress={"done": 1, "total": 2, "message": f"reading {SECRET}"},
    )
    JobAttempt.objects.create(
        job_id=job_id,
        attempt=1,
        outcome="error",
        error_type="ValueError",
        traceback=f"Traceback ...\nValueError: bad record {SECRET}",
    )
    return job_id


@override_settings(PQJOBS={"ADMIN_DATA_PERMISSION": "django_pqjobs.change_job"})
def test_job_data_is_hidden_from_staff_without_the_data_permission(viewer, operator):
    job_id = job_with_data()
    for url in (CHANGELIST, change_url(job_id)):
        hidden = viewer.get(url)
        assert hidden.status_code == 200
        assert SECRET not in hidden.content.decode(), url
        assert SECRET in operator.get(url).content.decode(), url
    page = viewer.get(change_url(job_id)).content.decode()
    assert "Hidden: seeing a job&#x27;s payload" in page and "django_pqjobs.change_job" in page
    assert "ValueError" in viewer.get(CHANGELIST).content.decode()  # the error type stays
    assert "50% " in page  # progress without its message


def test_by_default_whoever_may_view_jobs_sees_their_data(viewer):
    job_id = job_with_data()
    assert SECRET in viewer.get(change_url(job_id)).content.decode()


@pytest.mark.parametrize(
    "query",
    [
        f"payload__patient={SECRET}",
        "payload__patient__startswith=p",
        "last_error__icontains=record",
        "result__diagnosis__isnull=False",
        "schedule__payload__x=1",
    ],
)
def test_lookups_that_are_not_offered_filters_are_refused(viewer, query):
    job_with_data()
    response = viewer.get(f"{CHANGELIST}?{query}")
    assert response.status_code == 400
    assert "does not filter by" in response.content.decode() or "not allowed" in (
        response.content.decode()
    )
    assert SECRET not in response.content.decode()


# --- 11: unindexed sorts and free lookups from the URL --------------------------------------


def rows_query(captured: CaptureQueriesContext) -> str:
    """The statement that read the list's rows (without its LIMIT)."""
    [sql] = [
        q["sql"] for q in captured.captured_queries if q["sql"].startswith('SELECT "pqjobs_job"')
    ]
    return re.sub(r" LIMIT \d+$", "", sql)


@pytest.mark.parametrize(
    "order, expected",
    [
        # Column 0 is the action checkbox, 1 the id, 2 the job type, 3 the queue...
        ("3", 'ORDER BY "pqjobs_job"."id" DESC'),  # queue: no index, not sortable
        ("4", 'ORDER BY "pqjobs_job"."id" DESC'),  # status
        ("3.5.7.8.9", 'ORDER BY "pqjobs_job"."id" DESC'),
        (".".join(["3", "5", "7"] * 700), 'ORDER BY "pqjobs_job"."id" DESC'),  # 2,100 terms
        ("1", 'ORDER BY "pqjobs_job"."id" ASC'),
        ("3.2.1", 'ORDER BY "pqjobs_job"."job_type" ASC, "pqjobs_job"."id" DESC'),
        ("-2.1", 'ORDER BY "pqjobs_job"."job_type" DESC, "pqjobs_job"."id" ASC'),
        ("x.-.99999999999.0", 'ORDER BY "pqjobs_job"."id" DESC'),
    ],
)
def test_the_list_sorts_only_by_indexed_columns_one_at_a_time(operator, order, expected):
    enqueue_job("t")
    with CaptureQueriesContext(connection) as captured:
        response = operator.get(CHANGELIST, {"o": order})
    assert response.status_code == 200
    assert rows_query(captured).endswith(f" {expected}")
    # Only the sortable columns offer a sort link.
    page = response.content.decode()
    assert page.count('class="sortable') == 2


@pytest.mark.parametrize(
    "query",
    ["job_type__regex=(a%2B)%2B%24", "job_type__iregex=.*", "status__in=done,failed", "id__gt=0"],
)
def test_free_lookups_from_the_url_are_refused(operator, query):
    enqueue_job("t")
    with CaptureQueriesContext(connection) as captured:
        response = operator.get(f"{CHANGELIST}?{query}")
    assert response.status_code == 400
    assert "does not filter by" in response.content.decode()
    assert not [q for q in captured.captured_queries if q["sql"].startswith('SELECT "pqjobs_job"')]


def test_pages_past_the_last_offered_one_are_refused(operator):
    enqueue_job("t")
    response = operator.get(CHANGELIST, {"p": "5000"})
    assert response.status_code == 400
    assert "pages go from 1 to 1000" in response.content.decode()
    assert operator.get(CHANGELIST, {"p": "0"}).status_code == 400


def test_facets_are_never_counted(operator):
    enqueue_job("t")
    with CaptureQueriesContext(connection) as captured:
        response = operator.get(CHANGELIST, {"_facets": "True"})
    assert response.status_code == 200
    assert not [q for q in captured.captured_queries if "FILTER (WHERE" in q["sql"]]


@pytest.fixture
def table_locked() -> Iterator[None]:
    """Another session holds an exclusive lock on the job table: every read of it waits."""
    params = connection.get_connection_params()
    params.pop("cursor_factory", None)
    with psycopg.connect(**params) as other:
        other.execute("LOCK TABLE pqjobs_job IN ACCESS EXCLUSIVE MODE")
        yield
        other.rollback()


def test_a_list_that_would_wait_or_scan_is_stopped_by_the_statement_timeout(
    operator, monkeypatch, table_locked
):
    monkeypatch.setattr(JobAdmin, "list_statement_timeout", 0.3)
    started = time.monotonic()
    response = operator.get(CHANGELIST, {"status__exact": "cancelled"})
    elapsed = time.monotonic() - started
    assert response.status_code == 503
    assert "stopped this list after 0.3 s" in response.content.decode()
    assert elapsed < bound(60)  # stopped, not waiting for the lock (held until the test ends)


@pytest.fixture
def fan_out() -> int:
    """A job with 10,050 dependents: more than the paginator counts in one bounded step,
    behind a filter (an array of ids) whose rows the planner cannot estimate."""
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO pqjobs_job (job_type, queue, payload, status, priority, attempts, "
            "max_attempts, run_after, created_at, has_dependents) "
            "SELECT 'fan', 'default', '{}', 'waiting', 0, 0, 3, now(), now(), g = 0 "
            "FROM generate_series(0, 10050) g RETURNING id"
        )
        ids = sorted(row[0] for row in cursor.fetchall())
        cursor.execute(
            "INSERT INTO pqjobs_dependency (job_id, depends_on_id) SELECT unnest(%s::bigint[]), %s",
            [ids[1:], ids[0]],
        )
        cursor.execute("ANALYZE pqjobs_job")
    return ids[0]


def slow_counts(monkeypatch, *, bounded: bool) -> None:
    """Every full COUNT of the job list (and, if ``bounded``, every bounded one) runs out
    of the statement timeout, as a real count of a huge list does under load."""
    original = QuerySet.count

    def count(self):
        if self.model is Job and (bounded or not self.query.is_sliced):
            with connections[self.db].cursor() as cursor:
                cursor.execute("SELECT pg_sleep(2)")
        return original(self)

    monkeypatch.setattr(QuerySet, "count", count)


@pytest.mark.parametrize("bounded", [False, True], ids=["full count", "every count"])
def test_a_count_out_of_time_never_makes_the_list_read_every_row(
    operator, monkeypatch, fan_out, bounded
):
    # The planner expects ~10 dependents; the bounded count sees more than 10,000, and the
    # full count runs out of time. The page still shows 50 rows, with LIMIT, and a count
    # no lower than what was seen. When even the bounded count runs out of time, the count
    # is the planner's (small) estimate, and still the list reads one page only.
    monkeypatch.setattr(JobAdmin, "list_statement_timeout", 0.3)
    slow_counts(monkeypatch, bounded=bounded)
    with CaptureQueriesContext(connection) as captured:
        response = operator.get(CHANGELIST, {"dependents_of": fan_out})
    assert response.status_code == 200
    body = response.content.decode()
    assert body.count('<tr><td class="action-checkbox">') == 50
    if not bounded:
        assert "10001 jobs" in body
    rows = [
        q["sql"]
        for q in captured.captured_queries
        if q["sql"].startswith('SELECT "pqjobs_job"."id"') and "ORDER BY" in q["sql"]
    ]
    assert rows and all(sql.rstrip().endswith("LIMIT 50") for sql in rows), rows


def test_a_list_the_planner_underestimates_is_counted_exactly(operator, fan_out):
    response = operator.get(CHANGELIST, {"dependents_of": fan_out})
    assert response.status_code == 200
    assert "10050 jobs" in response.content.decode()


def test_the_time_limit_ends_with_the_list_even_inside_a_request_transaction():
    def current() -> str:
        with connection.cursor() as cursor:
            cursor.execute("SHOW statement_timeout")
            return cursor.fetchone()[0]

    with transaction.atomic():  # as with ATOMIC_REQUESTS
        before = current()
        with statement_timeout("default", 0.3):
            assert current() == "300ms"
        assert current() == before


def test_a_refusal_names_the_parameter_as_text(operator):
    response = operator.get(CHANGELIST + "?%3Cscript%3Ealert(1)%3C/script%3E=1")
    assert response.status_code == 400
    page = response.content.decode()
    assert "<script>alert(1)" not in page and "&lt;script&gt;alert(1)" in page


# --- 12: huge results loaded by the list and printed whole on the job page -----------------


def test_the_list_reads_no_payload_or_result(operator):
    big = "x" * (8 * 1024 * 1024)
    ids = [enqueue_job("t") for _ in range(3)]
    for job_id in ids:
        Job.objects.filter(pk=job_id).update(status="done", result={"blob": big})
    with CaptureQueriesContext(connection) as captured:
        response = operator.get(CHANGELIST)
    assert response.status_code == 200
    selected = rows_query(captured).split(" FROM ")[0].removeprefix("SELECT ").split(", ")
    for column in ("payload", "result", "progress", "last_error"):
        assert f'"pqjobs_job"."{column}"' not in selected
    assert len(response.content) < 200_000


def test_the_job_page_shows_excerpts_of_huge_values_and_says_how_much_is_cut(operator):
    big = "x" * (8 * 1024 * 1024)
    job_id = enqueue_job("t")
    Job.objects.filter(pk=job_id).update(
        status="failed",
        result={"blob": big},
        last_error="Traceback\n" + "y" * 1_000_000 + "\nValueError: the end",
    )
    with connection.cursor() as cursor:  # a payload too big for enqueue_job, typed in by SQL
        cursor.execute(
            "UPDATE pqjobs_job SET payload = jsonb_build_object('blob', repeat('z', 3000000)) "
            "WHERE id = %s",
            [job_id],
        )
    # an excerpt cannot be read to mask its secrets: shown only to those who may see them
    masked = operator.get(change_url(job_id)).content.decode()
    assert "3,000,012 characters: too long to show with its secrets masked" in masked
    assert "zzzz" not in masked and "ValueError: the end" in masked
    response = make_user("trusted", "view_job", "view_job_secrets").get(change_url(job_id))
    assert response.status_code == 200
    page = response.content.decode()
    assert len(page) < 4 * SHOWN_CHARS
    assert f"Showing the first {SHOWN_CHARS:,} of 8,388,620 characters" in page
    assert f"Showing the first {SHOWN_CHARS:,} of 3,000,012 characters" in page
    assert "ValueError: the end" in page and "Showing the last 10,240 of" in page


def test_the_job_page_shows_the_latest_attempts_and_counts_the_others(operator):
    job_id = enqueue_job("t")
    Job.objects.filter(pk=job_id).update(status="failed", attempts=100)
    JobAttempt.objects.bulk_create(
        JobAttempt(
            job_id=job_id,
            attempt=n,
            outcome="error",
            error_type="ValueError",
            traceback="Traceback\n" + "t" * 50_000 + f"\nValueError: attempt {n}",
        )
        for n in range(1, 101)
    )
    page = operator.get(change_url(job_id)).content.decode()
    assert len(page) < 2 * SHOWN_ATTEMPTS * 11 * 1024
    assert "ValueError: attempt 100" in page and "ValueError: attempt 81" in page
    assert "ValueError: attempt 80<" not in page
    assert "80 earlier attempts not shown (the page shows the latest 20)" in page


def test_the_job_page_shows_a_value_too_deep_to_parse_as_stored(operator):
    job_id = enqueue_job("t")
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE pqjobs_job SET payload = (repeat('[', 3000) || repeat(']', 3000))::jsonb, "
            "result = (repeat('{\"a\": ', 3000) || '1' || repeat('}', 3000))::jsonb WHERE id = %s",
            [job_id],
        )
    assert operator.get(CHANGELIST).status_code == 200
    response = operator.get(change_url(job_id))
    assert response.status_code == 200
    assert "too deeply nested to show redacted" in response.content.decode()  # not parsed
    trusted = make_user("trusted", "view_job", "view_job_secrets").get(change_url(job_id))
    assert trusted.status_code == 200
    assert "[[[[" in trusted.content.decode()


# --- 13: NUL in a filter value; schedule pages with a broken row -----------------------------


@pytest.mark.parametrize(
    "query",
    [
        "job_type=a%00b",
        "queue=%00",
        "status__exact=%00",
        "has_error=%00",
        "created_at__gte=%00",
        "finished_at__isnull=%00",
        "q=%00",
        "o=%00",
        "p=%00",
    ],
)
def test_nul_in_a_list_parameter_is_a_clean_refusal(operator, query):
    enqueue_job("t")
    response = operator.get(f"{CHANGELIST}?{query}")
    assert response.status_code == 400
    assert "NUL character" in response.content.decode()
    schedules = operator.get(f"{SCHEDULES}?{query.replace('job_type', 'enabled__exact')}")
    assert schedules.status_code == 400


@pytest.mark.parametrize(
    "query, reason",
    [
        ("status__exact=bogus", "a status is one of waiting, ready, blocked, running, done"),
        ("queue=" + "q" * 150, "queue is longer than 100 characters"),
        ("has_error=maybe", "use yes or no"),
        ("created_at__gte=yesterday", "created_at__gte=&#x27;yesterday&#x27;: Enter a valid"),
        ("created_at__gte=0001-01-01", "give a date between the years 1 and 9999"),
        ("finished_at__lt=9999-12-31+23:59:59-05:00", "give a date between the years 1 and 9999"),
        ("created_at__lt=10000-01-01", "Enter a valid date/time"),
    ],
)
def test_filter_values_the_list_cannot_have_are_refused_with_the_reason(operator, query, reason):
    response = operator.get(f"{CHANGELIST}?{query}")
    assert response.status_code == 400
    assert reason in response.content.decode()


@override_settings(TIME_ZONE="Pacific/Kiritimati")
def test_dates_without_a_zone_are_read_in_the_current_one(operator):
    job_id = enqueue_job("t")
    for query in ("created_at__gte=2000-01-01", "created_at__gte=2000-01-01+10:00"):
        response = operator.get(f"{CHANGELIST}?{query}&created_at__lt=9999-01-01")
        assert response.status_code == 200
        assert change_url(job_id) in response.content.decode()
    assert operator.get(f"{CHANGELIST}?created_at__lt=9999-12-31+23:59").status_code == 400


@pytest.mark.parametrize(
    "broken, reason",
    [
        ("timezone = 'Mars/Olympus_Mons'", "invalid: timezone &#x27;Mars/Olympus_Mons&#x27;"),
        ("interval_seconds = 1e300", "invalid: interval must be at most 100 years"),
        ("cron = '61 * * * *', interval_seconds = NULL", "invalid: cron &#x27;61 * * * *&#x27;"),
        ("cron = 'every day', interval_seconds = NULL", "invalid: cron &#x27;every day&#x27;"),
        (
            "next_run_at = '9999-12-31 23:00+00', timezone = 'Pacific/Kiritimati'",
            "9999-12-31 23:00:00 UTC",
        ),
    ],
)
def test_schedule_pages_show_a_broken_row_as_invalid(operator, broken, reason):
    schedule = Schedule.objects.create(
        name="broken", job_type="tests.noop", interval_seconds=60, next_run_at="2030-01-01T00:00Z"
    )
    with connection.cursor() as cursor:
        cursor.execute(f"UPDATE pqjobs_schedule SET {broken}")
    for url in (SCHEDULES, schedule_url(schedule.pk)):
        response = operator.get(url)
        assert response.status_code == 200, url
        assert reason in response.content.decode(), url


# --- timestamps outside Python's calendar ------------------------------------------------


@pytest.mark.parametrize("zone", ["UTC", "Pacific/Kiritimati"])  # +14 h: past 9999 locally
def test_timestamps_past_pythons_calendar_never_make_a_page_fail(admin_client, settings, zone):
    """PostgreSQL stores 'infinity', year 200000 and 4000 BC; Python's datetime does not.
    Rows written so behind the application's back (every timestamp column, every active
    and finished status) are shown at the edge of the calendar, and the lists, the job
    pages, the dashboard, the metrics and the health view answer."""
    settings.TIME_ZONE = zone
    values = ["infinity", "-infinity", "200000-01-01", "4000-01-01 BC"]
    columns = ["run_after", "finished_at", "locked_at", "created_at", "heartbeat_at"]
    statuses = ["ready", "blocked", "running", "failed"]
    jobs = []
    with connection.cursor() as cursor:
        for n, (value, column) in enumerate((v, c) for v in values for c in columns):
            job = enqueue_job("tests.noop")
            status = statuses[n % len(statuses)]
            cursor.execute(
                f"UPDATE pqjobs_job SET {column} = %s::timestamptz, status = %s, "
                "blocked_by = CASE WHEN %s = 'blocked' THEN 'limit' END WHERE id = %s",
                [value, status, status, job],
            )
            jobs.append(job)
        cursor.execute(
            "INSERT INTO pqjobs_worker (worker_id, hostname, concurrency, started_at, "
            "heartbeat_at, loop_at) VALUES ('w', 'h', 1, 'infinity', '-infinity', 'infinity')"
        )
    pages = [
        CHANGELIST,
        f"{CHANGELIST}?status__exact=failed",
        f"{CHANGELIST}?status__exact=ready",
        reverse("admin:django_pqjobs_job_dashboard"),
        "/metrics",
        "/health/jobs",
        *(change_url(job) for job in jobs),
    ]
    answers = {page: admin_client.get(page).status_code for page in pages}
    assert {page: code for page, code in answers.items() if code not in (200, 503)} == {}
    page = admin_client.get(change_url(jobs[0])).content.decode()
    assert "after the year 9999" in page  # run_after 'infinity'

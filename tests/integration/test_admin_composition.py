"""The operator console for composition: the batch list and page, the job page's batch and
dependency links, the job list's filters by batch and by job, and the status ``waiting``.

The database keeps batch counts and releases dependents at commit (migration 0013), so
these tests commit (``transaction=True``) and run jobs with ``drain()``.
"""

from __future__ import annotations

import re

import pytest
from django.contrib.messages import get_messages
from django.db import connection, transaction
from django.test import Client, override_settings
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from django_pqjobs import JobGraph, batch, enqueue_batch, enqueue_job, get_batch
from django_pqjobs.admin.batches import batch_search
from django_pqjobs.admin.composition import SHOWN_EDGES
from django_pqjobs.admin.display import STATUS_COLOURS
from django_pqjobs.admin.search import job_search
from django_pqjobs.models import Batch, Job
from django_pqjobs.testing import drain

from ..helpers import job_status, make_user

pytestmark = pytest.mark.django_db(transaction=True)

JOBS = reverse("admin:django_pqjobs_job_changelist")
BATCHES = reverse("admin:django_pqjobs_batch_changelist")
DASHBOARD = reverse("admin:django_pqjobs_job_dashboard")


def job_url(job_id: int) -> str:
    return reverse("admin:django_pqjobs_job_change", args=[job_id])


def batch_url(batch_id: int) -> str:
    return reverse("admin:django_pqjobs_batch_change", args=[batch_id])


@pytest.fixture
def operator() -> Client:
    return make_user("operator", "view_job", "change_job")


@pytest.fixture
def viewer() -> Client:
    return make_user("viewer", "view_job")


def page(client: Client, url: str, status: int = 200) -> str:
    response = client.get(url)
    assert response.status_code == status, (url, response.status_code)
    return response.content.decode()


def listed_job_ids(html: str) -> set[int]:
    """The ids of the job list's rows (each row links its job page by id)."""
    return {int(n) for n in re.findall(r'<th class="field-id"><a href="[^"]*/job/(\d+)/', html)}


def callbacks_of(batch_id: int) -> list[Job]:
    return list(Job.objects.filter(callback_of_id=batch_id).order_by("id"))


# --- the batch list ---------------------------------------------------------------------


def test_the_batch_list_shows_progress_counts_and_filters_open_and_finished(viewer):
    finished = enqueue_batch("tests.noop", [{}, {}, {}], label="nightly-import")
    with batch(label="failing") as failing:
        enqueue_job("tests.permanent")
        enqueue_job("tests.noop")
    drain()
    still_open = enqueue_batch("tests.noop", [{}, {}], label="later", delay=3600)

    html = page(viewer, BATCHES)
    for opened in (finished, failing, still_open):
        assert f'href="{batch_url(opened.id)}' in html
    assert "nightly-import" in html and "3 / 3 finished" in html
    assert "2 / 2 finished" in html  # the failing batch finished: 1 done, 1 failed
    assert "0 / 2 finished" in html  # the delayed one
    assert 'class="pqjobs-bar-failed"' in html
    assert 'name="_selected_action"' not in html  # no actions, so no delete action

    opened_only = page(viewer, f"{BATCHES}?state=open")
    assert f'href="{batch_url(still_open.id)}' in opened_only
    assert f'href="{batch_url(finished.id)}' not in opened_only
    finished_only = page(viewer, f"{BATCHES}?state=finished")
    assert f'href="{batch_url(finished.id)}' in finished_only
    assert f'href="{batch_url(failing.id)}' in finished_only
    assert f'href="{batch_url(still_open.id)}' not in finished_only
    assert "use open or finished" in page(viewer, f"{BATCHES}?state=maybe", status=400)


def test_batches_are_found_by_id_or_label_and_no_term_crashes_the_search(viewer):
    nightly = enqueue_batch("tests.noop", [{}], label="Nightly Import")
    other = enqueue_batch("tests.noop", [{}], label="reports")

    by_id = page(viewer, f"{BATCHES}?q={other.id}")
    assert f'href="{batch_url(other.id)}' in by_id
    assert f'href="{batch_url(nightly.id)}' not in by_id
    by_label = page(viewer, f"{BATCHES}?q=nightly+imp")  # any case, part of it
    assert f'href="{batch_url(nightly.id)}' in by_label
    assert f'href="{batch_url(other.id)}' not in by_label

    # Digits int() refuses, a lone surrogate's bytes, a term longer than any label: no
    # match, no error. A NUL is refused as in every list.
    for term in ("%C2%B2", "%ED%A0%80", "x" * 100_000, "9" * 30):
        html = page(viewer, f"{BATCHES}?q={term}")
        assert f'href="{batch_url(nightly.id)}' not in html
    assert "NUL character" in page(viewer, f"{BATCHES}?q=a%00b", status=400)
    # What a URL cannot carry, code can: the search sends nothing PostgreSQL would refuse.
    batches = Batch.objects.all()
    assert list(batch_search(batches, "\ud800")) == []
    assert list(batch_search(batches, "a\x00b")) == []
    assert list(batch_search(batches, "²")) == []
    # The job list's and the audit trail's searches take "²" too (int() refuses it).
    assert page(viewer, f"{JOBS}?q=%C2%B2")
    admin = make_user("auditor", "view_operatoraction")
    assert page(admin, reverse("admin:django_pqjobs_operatoraction_changelist") + "?q=%C2%B2")


# --- the batch page ---------------------------------------------------------------------


def test_the_batch_page_counts_members_by_status_and_links_them_without_listing_them(viewer):
    with batch(label="mixed") as mixed:
        failing = enqueue_job("tests.permanent")
        done = enqueue_job("tests.noop")
        later = enqueue_job("tests.noop", delay=3600)
    drain()

    html = page(viewer, batch_url(mixed.id))
    members = JOBS + f"?batch__id__exact={mixed.id}"
    assert f'href="{members}&amp;status__exact=failed"' in html
    assert f'href="{members}&amp;status__exact=done"' in html
    assert f'href="{members}&amp;status__exact=ready"' in html
    assert f'href="{members}&amp;status__exact=running"' not in html  # none running
    assert f'href="{members}"' in html
    assert "3 members: 1 done, 1 failed, 0 cancelled" in html
    assert "open: 1 of 3 members not finished" in html
    # The page counts; it links no member but in its graph (of a bounded number of them).
    graph = re.search(r'<svg[^>]*class="[^"]*pqjobs-graph.*?</svg>', html, flags=re.S)
    assert graph is not None
    for member in (failing, done, later):
        assert job_url(member) not in html.replace(graph.group(0), "")
        assert job_url(member) in graph.group(0)

    # The links list the members of that status.
    assert listed_job_ids(page(viewer, members)) == {failing, done, later}
    assert listed_job_ids(page(viewer, f"{members}&status__exact=failed")) == {failing}


def test_the_batch_page_reads_members_in_one_group_by_whatever_their_number(viewer):
    small = enqueue_batch("tests.noop", [{}] * 3)
    large = enqueue_batch("tests.noop", [{"n": n} for n in range(400)])
    viewer.get(batch_url(small.id))  # session and content types warmed

    def queries(batch_id: int) -> list[str]:
        with CaptureQueriesContext(connection) as captured:
            html = page(viewer, batch_url(batch_id))
        assert "list them" in html
        return [q["sql"] for q in captured.captured_queries]

    few, many = queries(small.id), queries(large.id)
    assert len(few) == len(many)
    on_members = [sql for sql in many if "batch_id" in sql and "pqjobs_job" in sql]
    # the count by status, and the first members its graph draws (a bounded number)
    assert len(on_members) == 2 and "GROUP BY status" in on_members[0]
    assert "ORDER BY j.id LIMIT" in on_members[1]
    assert "400 members: 0 done" in page(viewer, batch_url(large.id))


def test_the_batch_page_shows_declared_callbacks_and_the_callback_jobs(viewer):
    opened = enqueue_batch(
        "tests.noop",
        [{}, {}],
        on_success="tests.batch_callback",
        on_finish="tests.noop",
        callback_payload={"note": "<b>all in</b>", "padding": "x" * 5000},
    )
    before = page(viewer, batch_url(opened.id))
    assert "on success" in before and "tests.batch_callback" in before
    assert "on finish" in before and "on failure" not in before
    assert "&lt;b&gt;all in&lt;/b&gt;" in before and "<b>all in" not in before
    assert "x" * 5000 not in before  # an excerpt, and how long the whole is
    assert "characters)" in before
    assert "none yet" in before

    drain()
    drain()  # the callbacks
    callbacks = callbacks_of(opened.id)
    assert [c.status for c in callbacks] == ["done", "done"]
    after = page(viewer, batch_url(opened.id))
    for callback in callbacks:
        assert f'href="{job_url(callback.id)}"' in after
    assert "none yet" not in after

    # The callback job's page says whose it is; a member's says which batch it is in.
    callback_page = page(viewer, job_url(callbacks[0].id))
    assert "<label>Callback of:</label>" in callback_page
    assert f'href="{batch_url(opened.id)}"' in callback_page
    member_page = page(viewer, job_url(opened.job_ids[0]))
    assert f'<a href="{batch_url(opened.id)}">batch #{opened.id}</a>' in member_page
    assert "(2 / 2 finished)" in member_page
    # The job list lists a batch's callback jobs.
    listed = page(viewer, f"{JOBS}?callback_of__id__exact={opened.id}")
    assert listed_job_ids(listed) == {c.id for c in callbacks}


@override_settings(PQJOBS={"ADMIN_DATA_PERMISSION": "django_pqjobs.change_job"})
def test_callback_payloads_are_hidden_without_the_data_permission(viewer, operator):
    opened = enqueue_batch("tests.noop", [{}], on_finish="tests.noop", callback_payload="secret")
    assert "secret" not in page(viewer, batch_url(opened.id))
    assert "secret" in page(operator, batch_url(opened.id))


def test_batches_are_read_only_and_shown_to_whoever_may_view_jobs(viewer, admin_client):
    opened = enqueue_batch("tests.noop", [{}], label="ro")
    assert page(viewer, BATCHES) and page(viewer, batch_url(opened.id))
    assert "Batches" in page(viewer, reverse("admin:app_list", args=["django_pqjobs"]))
    stranger = make_user("stranger")
    assert stranger.get(BATCHES).status_code == 403
    assert stranger.get(batch_url(opened.id)).status_code == 403

    # Not even a superuser adds, changes or deletes one.
    assert admin_client.get(reverse("admin:django_pqjobs_batch_add")).status_code == 403
    html = page(admin_client, batch_url(opened.id))
    assert 'name="_save"' not in html and "deletelink" not in html
    changed = admin_client.post(batch_url(opened.id), {"label": "changed", "total": 99})
    assert changed.status_code == 403
    deleted = admin_client.post(
        reverse("admin:django_pqjobs_batch_delete", args=[opened.id]), {"post": "yes"}
    )
    assert deleted.status_code == 403
    bulk = admin_client.post(
        BATCHES, {"action": "delete_selected", "_selected_action": [opened.id]}
    )
    assert bulk.status_code in (200, 302)
    assert Batch.objects.filter(pk=opened.id, label="ro", total=1).exists()


# --- the job list's filters by batch and by job -----------------------------------------


def test_the_job_list_filters_by_batch_and_refuses_what_is_not_an_id(viewer):
    first = enqueue_batch("tests.noop", [{}, {}])
    second = enqueue_batch("tests.noop", [{}])
    outsider = enqueue_job("tests.noop")
    html = page(viewer, f"{JOBS}?batch__id__exact={first.id}")
    assert listed_job_ids(html) == set(first.job_ids)
    assert f"batch #{first.id}" in html  # the applied filter, shown beside the list
    assert outsider not in listed_job_ids(html)
    assert listed_job_ids(page(viewer, f"{JOBS}?batch__id__exact={second.id}")) == set(
        second.job_ids
    )

    # The members are read through the batch's index and sorted, and a job's dependents
    # looked up by id: never by walking every job newer than them.
    def rows_query(url: str) -> str:
        with CaptureQueriesContext(connection) as captured:
            page(viewer, url)
        return [q["sql"] for q in captured.captured_queries if "progress_message" in q["sql"]][-1]

    members = rows_query(f"{JOBS}?batch__id__exact={first.id}")
    assert 'ORDER BY COALESCE("pqjobs_job"."id", "pqjobs_job"."id") DESC' in members
    by_type = rows_query(f"{JOBS}?batch__id__exact={first.id}&o=1")  # (a viewer has no actions)
    assert 'ORDER BY COALESCE("pqjobs_job"."job_type", "pqjobs_job"."job_type") ASC' in by_type
    assert '"pqjobs_job"."id" = ANY((ARRAY(SELECT' in rows_query(f"{JOBS}?dependents_of={outsider}")
    for bad in ("abc", "%C2%B2", "1.5", "9" * 30):
        refused = page(viewer, f"{JOBS}?batch__id__exact={bad}", status=400)
        assert "give a batch id (a whole number)" in refused
    assert "NUL character" in page(viewer, f"{JOBS}?batch__id__exact=1%00", status=400)
    assert "give a job id" in page(viewer, f"{JOBS}?dependents_of=x", status=400)


# --- the job page: dependencies and dependents ------------------------------------------


def test_the_job_page_links_dependencies_and_dependents_with_their_status(viewer):
    graph = JobGraph()
    graph.add("fetch", "tests.noop")
    graph.add("broken", "tests.permanent")
    graph.add("merge", "tests.noop", depends_on=["fetch", "broken"], on_dependency_failure="run")
    ids = graph.enqueue()
    plain = enqueue_job("tests.noop")

    merge = page(viewer, job_url(ids["merge"]))
    assert "Batch and dependencies" in merge
    assert f'<a href="{job_url(ids["fetch"])}">#{ids["fetch"]}</a>' in merge
    assert f'<a href="{job_url(ids["broken"])}">#{ids["broken"]}</a>' in merge
    assert "waiting for 2 dependencies" in merge
    assert "2 not finished yet" in merge
    fetch = page(viewer, job_url(ids["fetch"]))
    assert f'<a href="{job_url(ids["merge"])}">#{ids["merge"]}</a>' in fetch
    assert "<label>Dependents:</label>" in fetch
    # A job without batch or dependencies has no such section.
    assert "Batch and dependencies" not in page(viewer, job_url(plain))

    drain(["default"])  # fetch done, broken failed; merge runs anyway ("run")
    drain()
    after = page(viewer, job_url(ids["merge"]))
    assert "waiting for" not in after
    badges = re.findall(r'#(\d+)</a> <span style="background:[^"]*">(\w+)</span>', after)
    assert dict((int(pk), status) for pk, status in badges) == {
        ids["fetch"]: "done",
        ids["broken"]: "failed",
    }

    # The job list's filters by job.
    assert listed_job_ids(page(viewer, f"{JOBS}?dependencies_of={ids['merge']}")) == {
        ids["fetch"],
        ids["broken"],
    }
    assert listed_job_ids(page(viewer, f"{JOBS}?dependents_of={ids['fetch']}")) == {ids["merge"]}


def test_a_job_page_shows_fifty_dependents_and_links_the_rest(viewer):
    root = enqueue_job("tests.noop", delay=3600)
    graph = JobGraph()
    for n in range(SHOWN_EDGES + 20):
        graph.add(f"d{n}", "tests.noop", depends_on=[root])
    graph.add("fan_in", "tests.noop", depends_on=[f"d{n}" for n in range(SHOWN_EDGES + 5)])
    ids = graph.enqueue()
    dependents = sorted(ids[f"d{n}"] for n in range(SHOWN_EDGES + 20))

    html = page(viewer, job_url(root))
    shown = [pk for pk in dependents if f'<a href="{job_url(pk)}">#{pk}</a>' in html]
    assert len(shown) == SHOWN_EDGES
    assert "and 20 more" in html
    everyone = f"{JOBS}?dependents_of={root}"
    assert f'href="{everyone}"' in html
    assert listed_job_ids(page(viewer, everyone)) == set(dependents[-50:])  # page 1 of 2
    assert "70 jobs" in page(viewer, everyone)

    fan_in = page(viewer, job_url(ids["fan_in"]))
    assert "and 5 more" in fan_in
    assert f'href="{JOBS}?dependencies_of={ids["fan_in"]}"' in fan_in
    assert "waiting for 55 dependencies" in fan_in


# --- the status waiting -----------------------------------------------------------------


def test_waiting_jobs_have_a_colour_a_filter_a_dashboard_row_and_can_be_cancelled(operator):
    prerequisite = enqueue_job("tests.noop", queue="emails", delay=3600)
    waiting = enqueue_job("tests.noop", queue="emails", depends_on=[prerequisite])
    other = enqueue_job("tests.noop", queue="emails", depends_on=[prerequisite])
    assert job_status(waiting) == "waiting"

    others = {colour for status, colour in STATUS_COLOURS.items() if status != "waiting"}
    assert STATUS_COLOURS["waiting"] not in others
    listed = page(operator, f"{JOBS}?status__exact=waiting")
    assert listed_job_ids(listed) == {waiting, other}
    assert f'<span style="background:{STATUS_COLOURS["waiting"]}' in listed
    assert "waiting for 1 dependency" in listed
    assert "after its dependencies" in listed
    assert 'href="?status__exact=waiting"' in page(operator, JOBS)  # offered by the filter

    dashboard = page(operator, DASHBOARD)
    assert re.search(r"<td>emails</td><td>waiting</td><td>2</td>", dashboard)

    # The job page's Cancel button is enabled, and cancels it.
    job_page = page(operator, job_url(waiting))
    cancel = re.search(r"/action/cancel/.*?</form>", job_page, re.S)
    assert cancel and "disabled" not in cancel.group(0)
    button = operator.post(
        reverse("admin:django_pqjobs_job_action", args=[waiting, "cancel"]), follow=True
    )
    said = [str(m) for m in get_messages(button.wsgi_request)]
    assert len(said) == 1 and said[0].startswith(f"Job {waiting} cancelled")
    assert job_status(waiting) == "cancelled"
    # So does the bulk action.
    response = operator.post(
        JOBS, {"action": "cancel_action", "_selected_action": [other]}, follow=True
    )
    assert [str(m) for m in get_messages(response.wsgi_request)] == [
        "1 job cancelled or asked to stop."
    ]
    assert job_status(other) == "cancelled"
    assert "emails</td><td>waiting" not in page(operator, DASHBOARD)


def test_the_dedupe_key_search_is_still_served_by_the_unique_index():
    """Waiting jobs are active but hold no dedupe key: the search names the statuses of
    the partial unique index, or PostgreSQL cannot use it and reads the whole table."""
    enqueue_job("tests.noop", dedupe_key="invoice-7")
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        plan = job_search(Job.objects.all(), "invoice-7").explain()
    assert "pqjobs_job_hot_unique_key" in plan, plan
    assert list(
        job_search(Job.objects.all(), "invoice-7").values_list("dedupe_key", flat=True)
    ) == ["invoice-7"]


# --- Retry of a failed member -----------------------------------------------------------


def test_an_admin_retry_of_a_failed_member_reopens_the_batch_and_fires_callbacks_once_more(
    operator,
):
    with batch(on_failure="tests.batch_callback", on_finish="tests.batch_callback") as b:
        failing = enqueue_job("tests.permanent")
        enqueue_job("tests.noop")
    drain()
    assert len(callbacks_of(b.id)) == 2  # failure and finish, once
    first = page(operator, batch_url(b.id))
    assert "finished once, at" in first

    response = operator.post(
        JOBS, {"action": "retry_action", "_selected_action": [failing]}, follow=True
    )
    assert [str(m) for m in get_messages(response.wsgi_request)] == ["1 job put back to ready."]
    reopened = get_batch(b.id)
    assert (reopened.pending, reopened.failed, reopened.finished_at) == (1, 0, None)
    assert "open: 1 of 2 members not finished (reopened" in page(operator, batch_url(b.id))

    drain()
    callbacks = callbacks_of(b.id)
    assert len(callbacks) == 4  # exactly one more failure and one more finish
    assert [c.status for c in callbacks] == ["done"] * 4
    assert get_batch(b.id).finishes == 2
    again = page(operator, batch_url(b.id))
    assert "finished 2 times (a Retry reopened it)" in again
    for callback in callbacks:
        assert f'href="{job_url(callback.id)}"' in again

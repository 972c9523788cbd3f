"""Fair claiming for operators (issue 29): the weights of fair keys (set_fair_weight, the
command, the admin, each change audited), and what operators see of the keys: fair_keys(),
the admin's Fair keys page and dashboard, the job page, the metrics and jobs_health."""

from __future__ import annotations

import io
import re
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection
from django.db.models import F
from django.urls import reverse
from prometheus_client.parser import text_string_to_metric_families

from django_pqjobs import InvalidJobOption, enqueue_job, enqueue_many, fair_keys, set_fair_weight
from django_pqjobs.fairness import FairKey, waiting_longest, weights
from django_pqjobs.models import FairWeight, Job, OperatorAction
from tests.helpers import make_user
from tests.integration.test_least_privilege import (  # noqa: F401 - roles is a fixture
    _grant_the_projects_own_tables,
    acting_as,
    denied,
    manage,
    roles,
)

pytestmark = pytest.mark.django_db


def tenants(name: str, count: int) -> list[dict]:
    return [{"tenant": name, "n": n} for n in range(count)]


def audit_rows() -> list[tuple[str, str, str, str]]:
    rows = OperatorAction.objects.order_by("id")
    return list(rows.values_list("action", "actor", "target", "detail"))


def text_of(response) -> str:
    """The page as text (tags removed, whitespace collapsed)."""
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", response.content.decode()))


def make_waiting(key_counts: dict[str, int]) -> None:
    for name, count in key_counts.items():
        enqueue_many("tests.fair_noop", tenants(name, count))


# --- set_fair_weight: validated, stored, audited ---------------------------------------------


@pytest.mark.parametrize(
    ("key", "weight", "error", "message"),
    [
        (None, 3, ValueError, "key must be a string of 1-255 characters, got None"),
        ("", 3, InvalidJobOption, "key must be None or a string of 1-255 characters"),
        ("x" * 256, 3, InvalidJobOption, "1-255 characters"),
        (7, 3, InvalidJobOption, "key must be None or a string"),
        ("tenant:\x1b[31m", 3, InvalidJobOption, "key must not contain control characters"),
        ("tenant:\x00", 3, InvalidJobOption, "key contains a NUL character"),
        ("tenant:7", 0, ValueError, "weight must be from 1 to 1000, got 0"),
        ("tenant:7", 1001, ValueError, "weight must be from 1 to 1000, got 1001"),
        ("tenant:7", -5, ValueError, "weight must be from 1 to 1000, got -5"),
        ("tenant:7", True, ValueError, r"weight must be a whole number .* got True \(a bool\)"),
        ("tenant:7", 2.5, ValueError, r"whole number from 1 to 1000, got 2.5 \(a float\)"),
        ("tenant:7", "3", ValueError, r"got '3' \(a str\)"),
    ],
)
def test_set_fair_weight_refuses_bad_keys_and_weights_naming_the_problem(
    key, weight, error, message
):
    with pytest.raises(error, match=message):
        set_fair_weight(key, weight, by="ops")
    assert not FairWeight.objects.exists()
    assert not OperatorAction.objects.exists()


def test_set_fair_weight_refuses_a_bad_actor_and_changes_nothing():
    with pytest.raises(ValueError, match="by must not contain control characters"):
        set_fair_weight("tenant:7", 3, by="ops\n")
    assert not FairWeight.objects.exists()


def test_set_fair_weight_sets_changes_and_clears_a_row_each_change_audited():
    set_fair_weight("tenant:7", 3, by="alice")
    set_fair_weight("tenant:7", 1000, by="bob")
    set_fair_weight("tenant:8", 1)  # no by: nothing recorded, as for every operator action
    assert [(w.key, w.weight, w.set_by) for w in weights()] == [
        ("tenant:7", 1000, "bob"),
        ("tenant:8", 1, ""),
    ]
    set_fair_weight("tenant:7", None, by="carol")
    set_fair_weight("tenant:unknown", None, by="carol")  # nothing to clear: still recorded
    assert list(FairWeight.objects.values_list("key", flat=True)) == ["tenant:8"]
    assert audit_rows() == [
        ("fair_weight", "alice", "tenant:7", "fair key tenant:7: weight 3"),
        ("fair_weight", "bob", "tenant:7", "fair key tenant:7: weight 1000"),
        ("fair_weight", "carol", "tenant:7", "fair key tenant:7: cleared, weight 1"),
        ("fair_weight", "carol", "tenant:unknown", "fair key tenant:unknown: cleared, weight 1"),
    ]


def test_a_key_longer_than_the_audit_target_is_whole_in_the_detail():
    key = "tenant:" + "k" * 248  # 255 characters, the longest key
    set_fair_weight(key, 2, by="ops")
    [(_, _, target, detail)] = audit_rows()
    assert len(target) == 200 and target.endswith("…")
    assert detail == f"fair key {key}: weight 2"


def test_a_weight_applies_to_the_jobs_enqueued_after_it():
    enqueue_job("tests.fair_noop", {"tenant": "gold", "n": 0})
    set_fair_weight("tenant:gold", 4, by="ops")
    enqueue_many("tests.fair_noop", tenants("gold", 2))
    turns = list(Job.objects.order_by("id").values_list("fair_turn", flat=True))
    assert turns == [1.0, 1.25, 1.5]


# --- fair_keys(): the keys with the most work -----------------------------------------------


def test_fair_keys_counts_waiting_running_the_oldest_wait_and_the_weight():
    make_waiting({"a": 5, "b": 3, "c": 1})
    enqueue_many("tests.noop", [{}] * 20)  # no fair key: not counted
    enqueue_job("tests.fair_noop", {"tenant": "later", "n": 0}, delay=3600)  # not due
    jobs = Job.objects.filter(job_type="tests.fair_noop")
    # a's oldest job has been due 5 minutes; two of b's are blocked, one running
    first_a = jobs.filter(fair_key="tenant:a").order_by("id").first()
    Job.objects.filter(pk=first_a.pk).update(run_after=F("run_after") - timedelta(minutes=5))
    b_ids = list(jobs.filter(fair_key="tenant:b").order_by("id").values_list("id", flat=True))
    Job.objects.filter(pk__in=b_ids[:2]).update(status="blocked", blocked_by="limit")
    Job.objects.filter(pk=b_ids[2]).update(status="running", locked_by="w", fair_turn=None)
    # a job back to ready after a retry has no turn: it is counted all the same
    Job.objects.filter(pk=first_a.pk).update(fair_turn=None)
    # c: running only, its one job done meanwhile, another running
    Job.objects.filter(fair_key="tenant:c").update(status="done", fair_turn=None)
    enqueue_job("tests.fair_noop", {"tenant": "c", "n": 9})
    Job.objects.filter(fair_key="tenant:c", status="ready").update(status="running")
    FairWeight.objects.create(key="tenant:b", weight=3)

    found = fair_keys()
    assert [k.key for k in found] == ["tenant:a", "tenant:b", "tenant:later", "tenant:c"]
    a, b, later, c = found
    assert (a.waiting, a.running, a.weight) == (5, 0, 1)
    assert 299 < a.oldest_wait < 301  # one transaction: now() is the same throughout
    assert b == FairKey("tenant:b", waiting=2, running=1, oldest_wait=None, weight=3)
    assert later == FairKey("tenant:later", waiting=1, running=0, oldest_wait=None, weight=1)
    assert c == FairKey("tenant:c", waiting=0, running=1, oldest_wait=None, weight=1)
    assert [k.key for k in fair_keys(limit=2)] == ["tenant:a", "tenant:b"]


@pytest.mark.parametrize("limit", [0, 1001, True, 2.0])
def test_fair_keys_refuses_a_bad_limit(limit):
    with pytest.raises(ValueError, match="limit must be a whole number from 1 to 1000"):
        fair_keys(limit=limit)


def test_fair_keys_reads_through_the_partial_indexes_not_the_whole_table():
    """Each arm has an index whose predicate it implies: with sequential scans made
    prohibitively expensive, the plan has none on the job table (the 1M-row plan and
    timing are in docs/guides/fair-claiming.md)."""
    from django_pqjobs.fairness import _FAIR_KEYS

    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute("EXPLAIN " + _FAIR_KEYS, [10])
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "Seq Scan on pqjobs_job" not in plan, plan
    for index in ("pqjobs_job_claim", "pqjobs_job_blocked_key", "pqjobs_job_running"):
        assert index in plan, plan
    assert "pqjobs_job_fair_claim" in plan or "pqjobs_job_fair_key" in plan, plan


def test_waiting_longest_names_the_keys_due_longest_in_the_queues_asked():
    make_waiting({"a": 2, "b": 2})
    enqueue_job("tests.fair_noop", {"tenant": "q", "n": 0}, queue="other")
    Job.objects.filter(fair_key="tenant:a").update(run_after=F("run_after") - timedelta(seconds=90))
    Job.objects.filter(fair_key="tenant:q").update(run_after=F("run_after") - timedelta(hours=1))
    assert [k for k, _ in waiting_longest(60)] == ["tenant:q", "tenant:a"]
    [(key, seconds)] = waiting_longest(60, queues=["default"])
    assert key == "tenant:a" and 89 < seconds < 91
    assert waiting_longest(7200) == []


# --- manage.py set_fair_weight ----------------------------------------------------------------


def command(*args: str) -> str:
    out = io.StringIO()
    call_command("set_fair_weight", *args, stdout=out)
    return out.getvalue()


def test_set_fair_weight_command_lists_sets_clears_and_refuses_bad_input():
    assert "no weight is set: every fair key weighs 1" in command("--list")
    assert "weight 3, for its jobs enqueued from now on" in command("tenant:7", "3", "--by", "ops")
    command("tenant:8", "2")
    make_waiting({"7": 4, "9": 1})
    listing = command()  # nothing: the same as --list
    assert listing == command("--list")
    assert "tenant:7: weight 3 (set " in listing and "by ops" in listing
    assert "tenant:8: weight 2" in listing
    assert "fair keys with the most jobs waiting (top 10):" in listing
    assert "tenant:7: 4 waiting, 0 running, oldest due waited 0 s, weight 3" in listing
    assert "tenant:9: 1 waiting, 0 running, oldest due waited 0 s, weight 1" in listing
    assert "cleared, it weighs 1" in command("tenant:8", "--clear")
    for args, message in [
        (["tenant:7", "0"], "weight must be from 1 to 1000, got 0"),
        (["tenant:7", "5000"], "weight must be from 1 to 1000, got 5000"),
        (["tenant:7", "3", "--clear"], "not both"),
        (["tenant:7"], "give the weight of tenant:7"),
        (["--clear"], "--clear needs the key"),
        (["tenant:7", "--list"], "--list takes no key"),
        (["bad\x07key", "3"], "key must not contain control characters"),
        (["x" * 256, "3"], "1-255 characters"),
        (["tenant:7", "3", "--by", "a\nb"], "control characters"),
    ]:
        with pytest.raises(CommandError, match=message):
            command(*args)
    assert dict(FairWeight.objects.values_list("key", "weight")) == {"tenant:7": 3}
    actors = [(target, actor) for _, actor, target, _ in audit_rows()]
    assert actors[0] == ("tenant:7", "ops")
    assert len(actors) == 3  # set 7, set 8, clear 8: each under --by or the system user


def test_the_command_takes_database():
    with pytest.raises(CommandError, match="database alias 'nope' is not in DATABASES"):
        command("tenant:7", "3", "--database", "nope")


# --- the admin ---------------------------------------------------------------------------------


@pytest.fixture
def operator():
    return make_user(
        "alice",
        "view_job",
        "view_fairweight",
        "add_fairweight",
        "change_fairweight",
        "delete_fairweight",
    )


def test_the_fair_keys_page_shows_the_top_ten_with_their_weights(operator):
    make_waiting({f"t{n:02}": n for n in range(1, 13)})
    FairWeight.objects.create(key="tenant:t12", weight=5)
    Job.objects.filter(fair_key="tenant:t11").update(
        run_after=F("run_after") - timedelta(minutes=3)
    )
    response = operator.get(reverse("admin:django_pqjobs_fairweight_changelist"))
    assert response.status_code == 200
    page = text_of(response)
    assert "Fair keys with the most jobs waiting" in page
    shown = re.findall(r"tenant:t\d\d", page.split("Weights")[0])
    assert shown == [f"tenant:t{n:02}" for n in range(12, 2, -1)]  # top 10, most first
    assert "tenant:t12 12 0 0 ms 5" in page
    assert "tenant:t11 11 0 3.0 min 1" in page
    body = response.content.decode()
    # a key with a weight links to its row; the others to the add form, filled in
    assert reverse("admin:django_pqjobs_fairweight_change", args=["tenant_3At12"]) in body
    assert "/add/?key=tenant%3At11&amp;weight=1" in body


def test_the_fair_keys_page_without_fair_jobs(operator):
    response = operator.get(reverse("admin:django_pqjobs_fairweight_changelist"))
    assert response.status_code == 200
    assert "No job with a fair key is waiting or running." in text_of(response)


def test_the_busiest_keys_are_shown_only_to_users_who_may_see_jobs():
    make_waiting({"secret": 3})
    weights_only = make_user("wendy", "view_fairweight", "change_fairweight")
    response = weights_only.get(reverse("admin:django_pqjobs_fairweight_changelist"))
    assert response.status_code == 200
    assert "tenant:secret" not in response.content.decode()
    assert "Fair keys with the most jobs waiting" not in text_of(response)


def test_the_admin_adds_changes_and_deletes_a_weight_each_audited(operator):
    add = reverse("admin:django_pqjobs_fairweight_add")
    assert operator.get(add + "?key=tenant:7&weight=1").status_code == 200
    response = operator.post(add, {"key": "tenant:7", "weight": "3"})
    assert response.status_code == 302
    assert FairWeight.objects.get(key="tenant:7").set_by == "alice"
    change = reverse("admin:django_pqjobs_fairweight_change", args=["tenant_3A7"])
    assert operator.get(change).status_code == 200
    assert operator.post(change, {"weight": "10"}).status_code == 302
    for refused in (
        operator.post(add, {"key": "x\x07y", "weight": "2"}),
        operator.post(add, {"key": "tenant:8", "weight": "1001"}),
        operator.post(change, {"weight": "0"}),
    ):
        assert refused.status_code == 200
        content = refused.content
        assert any(
            reason in content
            for reason in (b"control characters", b"less than or equal", b"greater than or equal")
        ), content
    delete = reverse("admin:django_pqjobs_fairweight_delete", args=["tenant_3A7"])
    assert operator.post(delete, {"post": "yes"}).status_code == 302
    assert not FairWeight.objects.exists()
    assert audit_rows() == [
        ("fair_weight", "alice", "tenant:7", "fair key tenant:7: weight 3"),
        ("fair_weight", "alice", "tenant:7", "fair key tenant:7: weight 10"),
        ("fair_weight", "alice", "tenant:7", "fair key tenant:7: cleared, weight 1"),
    ]


def test_the_admin_bulk_delete_of_weights_is_audited_per_key(operator):
    set_fair_weight("tenant:1", 2)
    set_fair_weight("tenant:2", 3)
    response = operator.post(
        reverse("admin:django_pqjobs_fairweight_changelist"),
        {"action": "delete_selected", "_selected_action": ["tenant:1", "tenant:2"], "post": "yes"},
    )
    assert response.status_code == 302
    assert not FairWeight.objects.exists()
    assert [target for _, _, target, _ in audit_rows()] == ["tenant:1", "tenant:2"]


def test_the_dashboard_marks_fair_shared_queues_and_links_the_fair_keys(operator):
    make_waiting({"a": 2})
    enqueue_many("tests.noop", [{}] * 2, queue="plain")
    enqueue_job("tests.noop", queue="keyed", fair_key="tenant:z")
    response = operator.get(reverse("admin:django_pqjobs_job_dashboard"))
    assert response.status_code == 200
    page = text_of(response)
    assert "default (fair-shared) ready 2" in page
    assert "keyed (fair-shared) ready 1" in page
    assert "plain ready 2" in page
    assert (
        "Fair-shared queues (among due jobs of equal priority, workers take fair keys in "
        "turns): default (2 ready jobs with a fair key; declared by tests.fair_noop), keyed "
        "(1 ready job with a fair key)." in page
    )
    assert reverse("admin:django_pqjobs_fairweight_changelist") in response.content.decode()


def test_a_queue_whose_job_type_declares_a_fair_key_is_fair_shared_without_jobs(operator):
    response = operator.get(reverse("admin:django_pqjobs_job_dashboard"))
    assert "default (declared by tests.fair_noop)" in text_of(response)
    viewer = make_user("victor", "view_job")  # may not see the weights: no link
    response = viewer.get(reverse("admin:django_pqjobs_job_dashboard"))
    assert response.status_code == 200
    assert "fairweight" not in response.content.decode()


def test_the_job_page_shows_the_fair_key_its_weight_and_its_turn(operator):
    set_fair_weight("tenant:a", 2)
    job_id = enqueue_job("tests.fair_noop", {"tenant": "a", "n": 0})
    page = text_of(operator.get(reverse("admin:django_pqjobs_job_change", args=[job_id])))
    assert "Fair key: tenant:a — weight 2; turn 0.5" in page
    Job.objects.filter(pk=job_id).update(status="running", fair_turn=None)
    page = text_of(operator.get(reverse("admin:django_pqjobs_job_change", args=[job_id])))
    assert "Fair key: tenant:a — weight 2 ( fair keys )" in page
    plain = enqueue_job("tests.noop")
    page = text_of(operator.get(reverse("admin:django_pqjobs_job_change", args=[plain])))
    assert "Fair key:" not in page  # a row only for a job that has one


# --- metrics and jobs_health ---------------------------------------------------------------


def scrape() -> dict[str, dict[str, float]]:
    """``{family: {key: value}}`` of the fair key families of one scrape."""
    client = make_user("scraper")
    response = client.get("/metrics")
    assert response.status_code == 200
    found: dict[str, dict[str, float]] = {}
    helps = {}
    for family in text_string_to_metric_families(response.content.decode()):
        if family.name.startswith("pqjobs_fair_key"):
            helps[family.name] = family.documentation
            found[family.name] = {s.labels["key"]: s.value for s in family.samples}
    for text in helps.values():
        assert "the 10 fair keys with the most jobs waiting only" in text
    return found


def test_the_metrics_show_the_ten_keys_with_the_most_jobs_waiting_only():
    make_waiting({f"t{n:02}": n for n in range(1, 16)})
    Job.objects.filter(fair_key="tenant:t15").update(
        run_after=F("run_after") - timedelta(minutes=2)
    )
    running = Job.objects.filter(fair_key="tenant:t14").order_by("id")[:4]
    Job.objects.filter(pk__in=[j.pk for j in running]).update(status="running", fair_turn=None)
    families = scrape()
    assert set(families) == {
        "pqjobs_fair_key_waiting",
        "pqjobs_fair_key_running",
        "pqjobs_fair_key_oldest_wait_seconds",
    }
    top = {f"tenant:t{n:02}" for n in range(6, 16)}
    for samples in families.values():
        assert set(samples) == top  # ten keys, the same in each family
    assert families["pqjobs_fair_key_waiting"]["tenant:t15"] == 15
    assert families["pqjobs_fair_key_waiting"]["tenant:t14"] == 10
    assert families["pqjobs_fair_key_running"]["tenant:t14"] == 4
    assert families["pqjobs_fair_key_running"]["tenant:t13"] == 0
    assert 119 < families["pqjobs_fair_key_oldest_wait_seconds"]["tenant:t15"] < 121


def test_without_fair_keys_the_families_are_empty():
    assert scrape() == {
        "pqjobs_fair_key_waiting": {},
        "pqjobs_fair_key_running": {},
        "pqjobs_fair_key_oldest_wait_seconds": {},
    }


def test_a_run_after_written_as_minus_infinity_is_an_endless_wait_not_an_error(operator):
    make_waiting({"a": 1})
    with connection.cursor() as cursor:
        cursor.execute("UPDATE pqjobs_job SET run_after = '-infinity'")
    [key] = fair_keys()
    assert key.oldest_wait == float("inf")
    assert scrape()["pqjobs_fair_key_oldest_wait_seconds"] == {"tenant:a": float("inf")}
    page = operator.get(reverse("admin:django_pqjobs_fairweight_changelist"))
    assert "tenant:a 1 0 forever 1" in text_of(page)


def health(*args: str) -> tuple[int, str]:
    out = io.StringIO()
    try:
        call_command("jobs_health", "--skip-worker", *args, stdout=out)
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    return code, out.getvalue().strip()


def test_jobs_health_names_the_fair_keys_waiting_past_the_lag_threshold():
    make_waiting({"a": 2, "b": 1, "c": 1, "d": 1, "e": 1})
    for key, minutes in [("a", 10), ("b", 8), ("c", 7), ("d", 6), ("e", 1)]:
        Job.objects.filter(fair_key=f"tenant:{key}").update(
            run_after=F("run_after") - timedelta(minutes=minutes)
        )
    code, line = health("--max-lag", "5m")
    assert code == 3
    assert line == (
        "lagging: the oldest due job has waited 600 s (max 300 s); fair keys waiting "
        "longest: tenant:a 600 s, tenant:b 480 s, tenant:c 420 s"
    )
    code, line = health("--max-lag", "15m")
    assert code == 0 and "fair" not in line
    code, line = health("--max-lag", "5m", "--queue", "other")
    assert code == 0 and "fair" not in line


# --- the roles of docs/guides/reliability.md ---------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_the_admin_role_sets_weights_and_sees_the_fair_keys_others_may_not(roles):  # noqa: F811
    from django.contrib.auth.models import User
    from django.test import Client

    make_waiting({"a": 3})
    Job.objects.filter(fair_key="tenant:a").update(run_after=F("run_after") - timedelta(hours=1))
    _grant_the_projects_own_tables(roles.admin)
    client = Client()
    client.force_login(User.objects.create_superuser("root", password="pw"))
    with acting_as(roles.admin):
        for page in (
            reverse("admin:django_pqjobs_fairweight_changelist"),
            reverse("admin:django_pqjobs_job_dashboard"),
            reverse("admin:django_pqjobs_job_change", args=[Job.objects.first().pk]),
            "/metrics",
        ):
            assert client.get(page).status_code == 200, page
        added = client.post(
            reverse("admin:django_pqjobs_fairweight_add"), {"key": "tenant:a", "weight": "2"}
        )
        assert added.status_code == 302
        assert re.search(
            r"fair keys waiting longest: tenant:a 36\d\d s$", health("--max-lag", "5m")[1]
        )
    host, port = connection.settings_dict["HOST"], connection.settings_dict["PORT"]
    as_admin = {"DATABASE_URL": f"postgres://{roles.admin_login}@{host}:{port}/unused"}
    done = manage(["set_fair_weight", "tenant:b", "5", "--by", "alice"], as_admin)
    assert done.returncode == 0, (done.stdout, done.stderr)
    listed = manage(["set_fair_weight", "--list"], as_admin)
    assert "tenant:a: 3 waiting" in listed.stdout, (listed.stdout, listed.stderr)
    assert dict(FairWeight.objects.values_list("key", "weight")) == {"tenant:a": 2, "tenant:b": 5}
    assert [actor for _, actor, _, _ in audit_rows()] == ["root", "alice"]
    for role in (roles.web, roles.worker):
        with acting_as(role):
            assert denied("INSERT INTO pqjobs_fair_weight (key, weight) VALUES ('k', 2)")
            assert denied("DELETE FROM pqjobs_fair_weight")
    with acting_as(roles.worker):  # a probe in a worker's container runs as the worker
        assert health("--max-lag", "5m")[0] == 3

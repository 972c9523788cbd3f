"""The database is a trust boundary: no role gains anything through our functions.

On a disposable cluster, two databases: one migrated by a superuser (the usual deployment),
one by a plain owner role. In each, real login roles attack as docs/guides/reliability.md
(the trust boundary) describes them: ``mallory`` with no grant at all (and, for the
CVE-2018-1058 attack, CREATE on ``public`` as PostgreSQL 14 and older gave every role), and
``webby``, a member of the guide's web role. Every attack plants code that would record
``current_user`` in a table and try ``ALTER ROLE ... SUPERUSER``; after each, the table is
empty and the attacker is no superuser.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

import psycopg
import pytest
from django.db import connection

from tests.helpers import documented_sql
from tests.pgcluster import Cluster, disposable_cluster

pytestmark = pytest.mark.slow

OWNER = "app_owner"
ATTACKER = "mallory"
WEB_MEMBER = "webby"

# What every planted function does if it ever runs: record whose rights it has, and try to
# make the attacker a superuser (which only works with a superuser's rights).
PAYLOAD = f"""
    INSERT INTO public.loot VALUES (current_user::text);
    BEGIN
        EXECUTE 'ALTER ROLE {ATTACKER} SUPERUSER';
        EXECUTE 'ALTER ROLE {WEB_MEMBER} SUPERUSER';
    EXCEPTION WHEN OTHERS THEN NULL;
    END;
"""


@dataclass(frozen=True)
class Target:
    cluster: Cluster
    database: str
    owner: str  # the role that ran migrate

    def connect(self, user: str = "postgres") -> psycopg.Connection:
        return psycopg.connect(
            host="127.0.0.1", port=self.cluster.port, user=user, dbname=self.database,
            autocommit=True,
        )  # fmt: skip


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    with disposable_cluster() as made:
        with made.connect() as db:
            db.execute(f"CREATE ROLE {OWNER} LOGIN")
            db.execute(f"CREATE DATABASE owned OWNER {OWNER}")
            guide = documented_sql("guides/reliability.md", "grants")
            for statement in re.findall(r"CREATE ROLE [^;]*;", guide):
                db.execute(statement)
            db.execute(f"CREATE ROLE {ATTACKER} LOGIN")
            db.execute(f"CREATE ROLE {WEB_MEMBER} LOGIN IN ROLE pqjobs_web_role")
        # the second database is migrated by a plain role that owns it
        made.manage("migrate", "--verbosity", "0", user=OWNER, database="owned")
        yield made


@pytest.fixture(scope="module", params=["migrated by a superuser", "migrated by a plain owner"])
def target(cluster: Cluster, request: pytest.FixtureRequest) -> Iterator[Target]:
    if request.param == "migrated by a superuser":
        made = Target(cluster, cluster.database, "postgres")
    else:
        made = Target(cluster, "owned", OWNER)
    guide = documented_sql("guides/reliability.md", "grants")
    grants = re.sub(r"CREATE ROLE [^;]*;", "", guide)
    with made.connect() as db:
        db.execute(grants)
        # as PostgreSQL 14 and older let every role (and upgraded databases still do)
        db.execute(f"GRANT CREATE ON SCHEMA public TO {ATTACKER}")
        db.execute("CREATE TABLE public.loot (who text)")
        db.execute("GRANT INSERT, SELECT ON public.loot TO PUBLIC")
    yield made


@pytest.fixture
def clean(target: Target) -> Iterator[Target]:
    """Each attack starts and ends with no loot, no planted object, no superuser."""
    yield target
    with target.connect() as db:
        db.execute("TRUNCATE public.loot")
        db.execute("DELETE FROM pqjobs_job")
        db.execute("DELETE FROM pqjobs_batch")
        for role in (ATTACKER, WEB_MEMBER):
            db.execute(f"ALTER ROLE {role} NOSUPERUSER")
        db.execute("DROP FUNCTION IF EXISTS public.pg_notify(text, character varying)")


def assert_nothing_gained(target: Target) -> None:
    with target.connect() as db:
        looted = db.execute("SELECT who FROM public.loot").fetchall()
        supers = db.execute(
            "SELECT rolname FROM pg_roles WHERE rolsuper AND rolname IN (%s, %s)",
            [ATTACKER, WEB_MEMBER],
        ).fetchall()
    assert looted == [], f"planted code ran as {looted}"
    assert supers == []


def plant(session: psycopg.Connection) -> None:
    """A function in the attacker's temporary schema that does PAYLOAD."""
    session.execute(
        "CREATE FUNCTION pg_temp.pwn() RETURNS boolean LANGUAGE plpgsql AS $$ BEGIN "
        f"{PAYLOAD} RETURN false; END $$"
    )
    session.execute(
        "CREATE FUNCTION pg_temp.pwn_trigger() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
        f"{PAYLOAD} RETURN NEW; END $$"
    )


def refused(session: psycopg.Connection, statement: str, *args: object) -> bool:
    try:
        session.execute(statement, list(args) or None)
    except psycopg.errors.InsufficientPrivilege:
        return True
    return False


# --- 1. a temporary view in place of pqjobs_worker -----------------------------------------


def test_a_temporary_view_does_not_stand_in_for_our_tables(clean):
    for role in (ATTACKER, WEB_MEMBER):
        with clean.connect(role) as session:
            plant(session)
            session.execute("CREATE TEMP VIEW pqjobs_worker AS SELECT pg_temp.pwn() AS listening")
            if role == ATTACKER:  # no grant: not even allowed to ask
                assert refused(session, "SELECT pqjobs_anyone_listens()")
            else:
                assert session.execute("SELECT pqjobs_anyone_listens()").fetchone() == (False,)
    assert_nothing_gained(clean)


# --- 2. a temporary table in place of pqjobs_batch -----------------------------------------


def test_a_temporary_table_does_not_stand_in_for_batches(clean):
    with clean.connect() as db:
        (batch,) = db.execute(
            "INSERT INTO pqjobs_batch (callbacks) VALUES ('{}') RETURNING id"
        ).fetchone()
    with clean.connect(WEB_MEMBER) as session:
        plant(session)
        session.execute(
            "CREATE TEMP TABLE pqjobs_batch (LIKE public.pqjobs_batch INCLUDING DEFAULTS)"
        )
        session.execute(
            "INSERT INTO pg_temp.pqjobs_batch (id, callbacks) VALUES (%s, '{}')", [batch]
        )
        session.execute(
            "CREATE TRIGGER pwn BEFORE UPDATE ON pg_temp.pqjobs_batch "
            "FOR EACH ROW EXECUTE FUNCTION pg_temp.pwn_trigger()"
        )
        session.execute("SELECT pqjobs_batch_seal(%s)", [batch])
    with clean.connect() as db:  # the real batch was sealed (and, empty, finished)
        assert db.execute(
            "SELECT sealed, finishes FROM pqjobs_batch WHERE id = %s", [batch]
        ).fetchone() == (True, 1)
    assert_nothing_gained(clean)


# --- 3. a temporary pqjobs_key_slot under the flow-control trigger ------------------------


def test_a_temporary_table_does_not_stand_in_for_concurrency_slots(clean):
    with clean.connect(WEB_MEMBER) as session:
        plant(session)
        session.execute(
            "CREATE TEMP TABLE pqjobs_key_slot "
            "(key varchar(255) PRIMARY KEY, running integer, last_grant integer)"
        )
        session.execute(
            "CREATE TRIGGER pwn BEFORE INSERT ON pg_temp.pqjobs_key_slot "
            "FOR EACH ROW EXECUTE FUNCTION pg_temp.pwn_trigger()"
        )
        session.execute(
            "INSERT INTO pqjobs_job (job_type, payload, concurrency_key, concurrency_limit) "
            "VALUES ('t', '{}', 'tenant:1', 1)"
        )
    with clean.connect() as db:  # the trigger wrote the real slot row
        assert db.execute(
            "SELECT count(*) FROM public.pqjobs_key_slot WHERE key = 'tenant:1'"
        ).fetchone() == (1,)
    assert_nothing_gained(clean)


# --- 4. CVE-2018-1058: an overload planted in public -----------------------------------------


def test_an_overload_planted_in_public_is_never_called(clean):
    with clean.connect(ATTACKER) as session:
        session.execute(
            "CREATE FUNCTION public.pg_notify(text, character varying) RETURNS void "
            f"LANGUAGE plpgsql AS $$ BEGIN {PAYLOAD} END $$"
        )
        session.execute("GRANT EXECUTE ON FUNCTION public.pg_notify(text, varchar) TO PUBLIC")
    with clean.connect(clean.owner) as worker:  # a worker finishes a job with a key
        (running,) = worker.execute(
            "INSERT INTO pqjobs_job (job_type, payload, status, attempts, locked_by, "
            "concurrency_key, concurrency_limit) "
            "VALUES ('t', '{}', 'running', 1, 'w', 'k', 1) RETURNING id"
        ).fetchone()
        (held,) = worker.execute(
            "INSERT INTO pqjobs_job (job_type, payload, status, blocked_by, concurrency_key, "
            "concurrency_limit) VALUES ('t', '{}', 'blocked', 'limit', 'k', 1) RETURNING id"
        ).fetchone()
        worker.execute("UPDATE pqjobs_job SET status = 'done' WHERE id = %s", [running])
        # the trigger released the held job (and notified through pg_catalog's pg_notify)
        assert worker.execute("SELECT status FROM pqjobs_job WHERE id = %s", [held]).fetchone() == (
            "ready",
        )
    assert_nothing_gained(clean)


# --- more: calling what no client may call ------------------------------------------------


def test_internal_functions_are_callable_by_no_client_role(clean):
    with clean.connect() as db:
        (batch,) = db.execute(
            "INSERT INTO pqjobs_batch (sealed, callbacks) VALUES (false, "
            """'{"finish": {"job_type": "cb", "queue": "default", "payload": {}, """
            """"priority": 0, "max_attempts": 1, "timeout": null}}') RETURNING id"""
        ).fetchone()
    for role in (ATTACKER, WEB_MEMBER):
        with clean.connect(role) as session:
            for _ in range(3):  # fire the callbacks of an open batch at will
                assert refused(session, "SELECT pqjobs_batch_finished(%s)", batch)
            for function in (
                "pqjobs_settle",
                "pqjobs_note_changes",
                "pqjobs_flow_admit",
                "pqjobs_flow_hold_paused",
                "pqjobs_flow_pauses_noted",
                "pqjobs_flow_slot_freed",
                "pqjobs_announce_finish",
                "pqjobs_fair_turn",
            ):
                # attaching an owner's trigger function to a table of one's own
                session.execute("CREATE TEMP TABLE IF NOT EXISTS mine (id bigint)")
                assert refused(
                    session,
                    f"CREATE TRIGGER t AFTER INSERT ON pg_temp.mine "
                    f"FOR EACH STATEMENT EXECUTE FUNCTION public.{function}()",
                ), function
    with clean.connect() as db:
        assert db.execute(
            "SELECT count(*) FROM pqjobs_job WHERE callback_of_id = %s", [batch]
        ).fetchone() == (0,)
    assert_nothing_gained(clean)


def test_a_role_without_grants_can_call_nothing(clean):
    with clean.connect(ATTACKER) as session:
        for call in (
            "SELECT pqjobs_anyone_listens()",
            "SELECT pqjobs_fair_start(ARRAY['k'], 0)",
            "SELECT pqjobs_batch_seal(1)",
            "SELECT pqjobs_claim('w', 1)",
            "SELECT pqjobs_complete('w', '[]')",
            "SELECT pqjobs_enqueue('t', 'default', '{}', 0, 1, NULL, 0, NULL, NULL, NULL, "
            "NULL, NULL)",
            "SELECT pqjobs_record_step(1, 'w', 1, 's', 'step', '1', true, NULL, true)",
        ):
            assert refused(session, call), call


# --- every function, audited from the catalog -----------------------------------------------


def test_every_function_pins_its_search_path_and_is_closed_to_public(target):
    with target.connect() as db:
        functions = db.execute(
            "SELECT p.proname, p.prosecdef, p.proconfig, "
            "EXISTS (SELECT 1 FROM aclexplode(coalesce(p.proacl, acldefault('f', p.proowner)))"
            "        a WHERE a.grantee = 0 AND a.privilege_type = 'EXECUTE'), "
            "pg_get_userbyid(p.proowner) "
            "FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace "
            "WHERE n.nspname NOT IN ('pg_catalog', 'information_schema') "
            "AND p.proname LIKE 'pqjobs%' ORDER BY 1"
        ).fetchall()
    assert len(functions) == 25  # pqjobs_enqueue twice: the positional form, deprecated
    for name, definer, config, public, owner in functions:
        assert "search_path=pg_catalog, pg_temp" in (config or []), (name, config)
        assert not public, f"{name}: EXECUTE for PUBLIC"
        assert owner == target.owner
        if definer:
            assert name in {
                "pqjobs_anyone_listens",
                "pqjobs_batch_seal",
                "pqjobs_batch_finished",
                "pqjobs_settle",
                "pqjobs_note_changes",
                "pqjobs_flow_admit",
                "pqjobs_flow_hold_paused",
                "pqjobs_flow_pauses_noted",
                "pqjobs_flow_slot_freed",
                "pqjobs_fair_turn",
                "pqjobs_fair_start",
                "pqjobs_history_prepare",
                "pqjobs_history_drop",
                "pqjobs_history_shelve",
                "pqjobs_history_unshelve",
                "pqjobs_job_forget",
            }, f"{name} runs with its owner's rights"


def test_the_test_database_is_audited_the_same_way(db):
    """The suite's own database (migrated by the test runner) passes the same audit."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT p.proname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace "
            "WHERE p.proname LIKE 'pqjobs%' AND n.nspname = current_schema() AND ("
            "NOT coalesce(p.proconfig, '{}') @> ARRAY['search_path=pg_catalog, pg_temp'] "
            "OR EXISTS (SELECT 1 FROM aclexplode(coalesce(p.proacl, acldefault('f', "
            "p.proowner))) a WHERE a.grantee = 0))"
        )
        assert cursor.fetchall() == []


# --- a schema every role may write is reported -------------------------------------------------


def test_a_schema_every_role_may_create_in_is_warned_about(db, capsys):
    from django.core.management import call_command

    from django_pqjobs.checks import check_database

    def schema_warnings() -> list:
        # only this test's subject: what earlier tests committed (a flush, a migration) may
        # leave the published encrypted types behind, which another check (W093) reports
        return [w for w in check_database(databases=["default"]) if w.id == "pqjobs.W090"]

    assert schema_warnings() == []
    with connection.cursor() as cursor:  # rolled back with the test's transaction
        cursor.execute("GRANT CREATE ON SCHEMA public TO PUBLIC")
    (warning,) = schema_warnings()
    assert 'REVOKE CREATE ON SCHEMA "public" FROM PUBLIC' in warning.msg
    assert check_database(databases=None) == []  # only where database checks are asked for
    with pytest.raises(SystemExit):  # no worker: the verdict is unchanged...
        call_command("jobs_health", "--any-host")
    captured = capsys.readouterr()
    assert captured.out.startswith("no worker")
    assert "warning: every database role may CREATE in schema 'public'" in captured.err


# --- a database migrated before the trust boundary --------------------------------------------


def test_migration_0016_closes_an_existing_database_and_keeps_its_roles_working(cluster):
    """Migrated to 0015 (here: all the way, then back, which runs 0016's way back), with
    roles granted as the guide said then (EXECUTE on functions came from PUBLIC), then
    migrated forward: PUBLIC may call nothing, and the roles do what they did."""
    with cluster.connect() as db:
        db.execute("CREATE DATABASE upgraded")
        db.execute("CREATE ROLE old_web LOGIN")
        db.execute("CREATE ROLE old_worker LOGIN")
    cluster.manage("migrate", "--verbosity", "0", database="upgraded")
    cluster.manage("migrate", "django_pqjobs", "0015", "--verbosity", "0", database="upgraded")
    upgraded = Target(cluster, "upgraded", "postgres")
    public_may_call = (
        "SELECT count(*) FROM pg_proc p WHERE p.proname LIKE 'pqjobs%' AND EXISTS ("
        "SELECT FROM aclexplode(coalesce(p.proacl, acldefault('f', p.proowner))) a "
        "WHERE a.grantee = 0)"
    )
    with upgraded.connect() as db:
        assert db.execute(public_may_call).fetchone() == (11,)  # as before 0016
        db.execute("GRANT SELECT, INSERT ON pqjobs_job TO old_web")
        db.execute("GRANT SELECT, UPDATE ON pqjobs_job TO old_worker")
        db.execute("GRANT SELECT ON pqjobs_pause TO old_worker")
    cluster.manage("migrate", "--verbosity", "0", database="upgraded")
    with upgraded.connect() as db:
        assert db.execute(public_may_call).fetchone() == (0,)
    enqueue = (
        "SELECT pqjobs_enqueue('t', 'default', '{}', 0, 1, NULL, 0, NULL, NULL, NULL, NULL, "
        "'pqjobs')"
    )
    with upgraded.connect("old_web") as web:
        (job_id,) = web.execute(enqueue).fetchone()
        assert refused(web, "SELECT pqjobs_claim('w', 1)")
        assert refused(web, "SELECT pqjobs_batch_finished(1)")
    with upgraded.connect("old_worker") as worker:
        assert worker.execute("SELECT id FROM pqjobs_claim('w', 5)").fetchall() == [(job_id,)]
        assert refused(worker, enqueue)  # it had no INSERT: it gets no enqueue

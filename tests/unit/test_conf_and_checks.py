import pytest
from django.core.checks import run_checks
from django.test import override_settings

from django_pqjobs.conf import CHECK_IDS, conf


def _ids(**pqjobs):
    with override_settings(PQJOBS=pqjobs):
        return {m.id for m in run_checks() if m.id and m.id.startswith("pqjobs.")}


def test_defaults_pass_the_checks():
    with override_settings(PQJOBS={}):
        assert conf.CONCURRENCY == 1
        assert conf.STALE_TIMEOUT == 1200
        assert conf.REAP_INTERVAL == 60
        assert conf.QUEUES is None
        assert conf.RETENTION == {"done": 7 * 86400, "failed": 30 * 86400, "cancelled": 7 * 86400}
    assert _ids() == set()


def test_settings_are_read_at_access_time():
    with override_settings(PQJOBS={"CONCURRENCY": 7}):
        assert conf.CONCURRENCY == 7
    with override_settings(PQJOBS={"CONCURRENCY": 3}):
        assert conf.CONCURRENCY == 3


@pytest.mark.parametrize(
    "key, value",
    [
        ("CONCURRENCY", 0),
        ("CONCURRENCY", "4"),
        ("MAX_ATTEMPTS", -1),
        ("STALE_TIMEOUT", -5),
        ("REAP_INTERVAL", "often"),
        ("HEARTBEAT_INTERVAL", 0),
        ("POLL_INTERVALS", []),
        ("LOOP_ERROR_DELAYS", "fast"),
        ("BACKOFF", "sometimes"),
        ("DEDUPE", "merge"),
        ("QUEUES", "default"),
        ("QUEUES", []),
        ("RETENTION", {"done": -1}),
        ("RETENTION", {"archived": 10}),
        ("PAYLOAD_MAX_BYTES", 0),
        ("LISTEN_NOTIFY", "yes"),
        ("ENABLED", "maybe"),
        ("DEFAULT_TIMEOUT", 0),
        ("DEFAULT_PRIORITY", 1.5),
        ("DEFAULT_QUEUE", ""),
        ("SHUTDOWN_TIMEOUT", -1),
        ("TIMEOUT_GRACE", 0),
        ("PRUNE_INTERVAL", -1),
        ("PREFETCH_MAX", -1),
        ("PREFETCH_MAX", 2.5),
        ("ISOLATION", "vm"),
    ],
)
def test_each_invalid_setting_has_its_stable_check_id(key, value):
    assert CHECK_IDS[key] in _ids(**{key: value})


def test_unknown_key_warns():
    assert "pqjobs.W001" in _ids(CONCURENCY=4)


def test_check_ids_are_unique():
    assert len(set(CHECK_IDS.values())) == len(CHECK_IDS)


def test_unknown_database_alias():
    assert "pqjobs.E003" in _ids(DATABASE="jobs")


@pytest.mark.filterwarnings("ignore:Overriding setting DATABASES")
def test_non_postgresql_engine_is_refused():
    databases = {
        "default": {"ENGINE": "django.db.backends.postgresql", "NAME": "x"},
        "lite": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"},
    }
    with override_settings(DATABASES=databases, PQJOBS={"DATABASE": "lite"}):
        messages = [m for m in run_checks() if m.id == "pqjobs.E001"]
    assert messages
    assert "needs PostgreSQL" in messages[0].msg and "sqlite3" in messages[0].msg


def test_environment_variables_are_honoured(monkeypatch):
    monkeypatch.setenv("WORKER_CONCURRENCY", "6")
    monkeypatch.setenv("WORKER_STALE_TIMEOUT", "300")
    monkeypatch.setenv("WORKER_REAP_INTERVAL", "15")
    monkeypatch.setenv("WORKER_ENABLED", "false")
    with override_settings(PQJOBS={}):
        assert conf.CONCURRENCY == 6
        assert conf.STALE_TIMEOUT == 300
        assert conf.REAP_INTERVAL == 15
        assert conf.ENABLED is False
    with override_settings(PQJOBS={"CONCURRENCY": 2}):
        assert conf.CONCURRENCY == 2  # an explicit PQJOBS key wins over the environment


def test_bad_environment_variable_fails_the_check_naming_the_variable(monkeypatch):
    monkeypatch.setenv("WORKER_CONCURRENCY", "four")
    with override_settings(PQJOBS={}):
        messages = [m for m in run_checks() if m.id == CHECK_IDS["CONCURRENCY"]]
    assert messages and "WORKER_CONCURRENCY" in messages[0].msg


def test_pqjobs_must_be_a_dict():
    with override_settings(PQJOBS=["CONCURRENCY", 4]):
        assert "pqjobs.E002" in {m.id for m in run_checks()}


def test_validated_values_are_reused_until_the_setting_changes(settings, monkeypatch):
    def hook(job):
        return None

    def other(job):
        return None

    settings.PQJOBS = {"HOOKS": {"pre_execute": hook}}
    first = conf.HOOKS
    assert first == {"pre_execute": hook}
    assert conf.HOOKS is first  # reused: validating imports hook paths
    settings.PQJOBS["HOOKS"]["pre_execute"] = other  # edited in place
    assert {"pre_execute": other} == conf.HOOKS
    settings.PQJOBS = {"HOOKS": {}}
    assert conf.HOOKS == {}

    monkeypatch.setenv("WORKER_CONCURRENCY", "3")
    assert conf.CONCURRENCY == 3
    monkeypatch.setenv("WORKER_CONCURRENCY", "5")
    assert conf.CONCURRENCY == 5
    monkeypatch.setenv("WORKER_CONCURRENCY", "zero")
    with pytest.raises(ValueError, match="WORKER_CONCURRENCY"):
        conf.CONCURRENCY  # noqa: B018

import functools
import importlib
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.core.checks import run_checks
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from django.test import override_settings

from django_pqjobs import job
from django_pqjobs.conf import Settings, conf
from django_pqjobs.registry import registry
from tests.helpers import check_ids


def check_id(key: str) -> str:
    return Settings.declaration(key).check_id


def test_defaults_pass_the_checks():
    with override_settings(PQJOBS={}):
        assert conf.CONCURRENCY == 1
        assert conf.STALE_TIMEOUT == 1200
        assert conf.REAP_INTERVAL == 60
        assert conf.QUEUES is None
        assert conf.RETENTION == {
            "done": 7 * 86400,
            "failed": 30 * 86400,
            "cancelled": 7 * 86400,
            "expired": 7 * 86400,
        }
    assert check_ids() == set()


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
        ("RECONCILE_INTERVAL", 0),
        ("RECONCILE_INTERVAL", "often"),
        ("PREFETCH_MAX", -1),
        ("PREFETCH_MAX", 2.5),
        ("ISOLATION", "vm"),
        ("METRICS_TOKEN", ""),
        ("METRICS_TOKEN", "   "),
        ("METRICS_TOKEN", "short-token"),
        ("METRICS_TOKEN", " " * 40),
        ("METRICS_TOKEN", "a" * 20 + " " + "b" * 20),
        ("METRICS_TOKEN", "a" * 40 + "\n"),
        ("METRICS_TOKEN", "\u00e9" * 40),
        ("METRICS_TOKEN", 1234),
        ("METRICS_TOKEN", b"b" * 40),
        ("METRICS_PUBLIC", "yes"),
        ("METRICS_PUBLIC", 1),
        ("PRIORITY_AGING", ["reports"]),
        ("PRIORITY_AGING", {"reports": {"every": 0, "up_to": 10}}),
        ("PRIORITY_AGING", {"reports": {"every": "1m", "up_to": 1.5}}),
        ("PRIORITY_AGING", {"reports": {"every": "1m", "up_to": 10, "cap": 5}}),
    ],
)
def test_each_invalid_setting_has_its_stable_check_id(key, value):
    assert check_id(key) in check_ids(**{key: value})


def test_unknown_key_warns():
    assert "pqjobs.W001" in check_ids(CONCURENCY=4)


def test_check_ids_are_unique():
    ids = [setting.check_id for setting in Settings.declarations()]
    assert len(set(ids)) == len(ids)


def test_unknown_database_alias():
    assert "pqjobs.E003" in check_ids(DATABASE="jobs")


def test_a_read_database_must_be_a_known_postgresql_alias():
    with override_settings(PQJOBS={"READ_DATABASE": "replica"}):
        [message] = [m for m in run_checks() if m.id == "pqjobs.E003"]
    assert message.msg == (
        "PQJOBS['READ_DATABASE'] names the database alias 'replica', which is not in DATABASES"
    )
    assert "pqjobs.E037" in check_ids(READ_DATABASE="")
    assert "pqjobs.E037" in check_ids(READ_DATABASE=7)


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
    assert messages[0].hint == (
        "Make DATABASES['lite'] a PostgreSQL database (13 or newer, ENGINE "
        "'django.db.backends.postgresql'), or point PQJOBS['DATABASE'] at one."
    )


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
        messages = [m for m in run_checks() if m.id == check_id("CONCURRENCY")]
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


# --- one declaration per setting -----------------------------------------------------------

SETTINGS_DOC = Path(__file__).resolve().parents[2] / "docs" / "reference" / "settings.md"


def documented_settings() -> dict[str, tuple[str, str]]:
    """``{key: (env var or '', check id)}`` from the table in docs/reference/settings.md."""
    documented = {}
    for line in SETTINGS_DOC.read_text().splitlines():
        cells = [cell.strip().strip("`") for cell in line.strip().strip("|").split("|")]
        if len(cells) == 5 and re.fullmatch(r"[A-Z_]+", cells[0]):
            key, _default, env, check, _meaning = cells
            documented[key] = (env, f"pqjobs.{check}")
    return documented


@pytest.mark.parametrize("setting", list(Settings.declarations()), ids=lambda s: s.name)
def test_each_declaration_is_complete_and_documented(setting):
    """A new setting needs only its declaration (and its row in the reference docs)."""
    setting.validate(setting.default, f"PQJOBS[{setting.name!r}]")  # the default is valid
    assert re.fullmatch(r"pqjobs\.E\d{3}", setting.check_id)
    assert setting.meaning.strip()
    assert documented_settings().get(setting.name) == (setting.env or "", setting.check_id)
    with override_settings(PQJOBS={}):
        getattr(conf, setting.name)  # readable through the settings object


def test_declarations_and_docs_list_the_same_settings():
    declared = [setting.name for setting in Settings.declarations()]
    assert len(declared) == len(set(declared)) >= 28
    assert set(documented_settings()) == set(declared)
    check_ids = [setting.check_id for setting in Settings.declarations()]
    assert len(check_ids) == len(set(check_ids))


def test_the_unknown_key_warning_suggests_a_close_match():
    with override_settings(PQJOBS={"CONCURENCY": 4, "stale_timeout": 5, "NOTHING_LIKE_IT": 1}):
        messages = {m.msg for m in run_checks() if m.id == "pqjobs.W001"}
    assert messages == {
        "PQJOBS has an unknown key 'CONCURENCY'; did you mean 'CONCURRENCY'?",
        "PQJOBS has an unknown key 'stale_timeout'; did you mean 'STALE_TIMEOUT'?",
        "PQJOBS has an unknown key 'NOTHING_LIKE_IT'",
    }


@pytest.mark.parametrize(
    "text, enabled",
    [
        *[(word, True) for word in ("true", "TRUE", "True", "1", "yes", "Yes", "on", " ON ")],
        *[(word, False) for word in ("false", "FALSE", "0", "no", "NO", "off", "Off", "")],
    ],
)
def test_worker_enabled_accepts_the_documented_words_in_any_case(monkeypatch, text, enabled):
    monkeypatch.setenv("WORKER_ENABLED", text)
    with override_settings(PQJOBS={}):
        assert conf.ENABLED is enabled
        assert "pqjobs.E014" not in check_ids()


def test_an_unrecognised_worker_enabled_value_is_a_check_error(monkeypatch):
    monkeypatch.setenv("WORKER_ENABLED", "enabled")
    with override_settings(PQJOBS={}):
        [message] = [m for m in run_checks() if m.id == "pqjobs.E014"]
        with pytest.raises(ValueError, match="WORKER_ENABLED"):
            conf.ENABLED  # noqa: B018
    assert message.msg == (
        "environment variable WORKER_ENABLED must be one of true/false/1/0/yes/no/on/off "
        "(any case), got 'enabled'"
    )


def test_listen_database_defaults_to_database(settings):
    settings.PQJOBS = {"DATABASE": "jobs"}
    assert conf.LISTEN_DATABASE == "jobs"
    settings.PQJOBS = {"DATABASE": "jobs", "LISTEN_DATABASE": "direct"}
    assert conf.LISTEN_DATABASE == "direct"


def test_read_database_defaults_to_database(settings):
    settings.PQJOBS = {"DATABASE": "jobs"}
    assert conf.READ_DATABASE == "jobs"
    settings.PQJOBS = {"DATABASE": "jobs", "READ_DATABASE": "replica"}
    assert conf.READ_DATABASE == "replica"


def test_checks_are_registered_by_the_app_not_by_importing_the_modules():
    from django.core.checks import registry

    import django_pqjobs.checks
    import django_pqjobs.schedules.checks

    registered = {check.__qualname__: check for check in registry.registry.registered_checks}
    assert registered["check_settings"].tags == ("compatibility",)
    assert registered["check_schedules"].tags == ("compatibility",)
    assert registered["check_handlers"].tags == ("compatibility",)
    before = set(registry.registry.registered_checks)
    importlib.reload(django_pqjobs.checks)
    importlib.reload(django_pqjobs.schedules.checks)
    assert set(registry.registry.registered_checks) == before


def test_bad_hook_setting_fails_its_check(settings):

    settings.PQJOBS = {"HOOKS": {"pre_execute": "no.such.module.fn"}}
    assert "pqjobs.E033" in {m.id for m in run_checks()}
    settings.PQJOBS = {"HOOKS": {"before": print}}
    assert "pqjobs.E033" in {m.id for m in run_checks()}
    settings.PQJOBS = {"ISOLATION": "vm"}
    assert "pqjobs.E032" in {m.id for m in run_checks()}


def test_fair_queues_are_validated_and_unknown_queues_warned_about():
    from django.core.checks import run_checks

    def messages_for(value: object) -> dict[str, str]:
        with override_settings(PQJOBS={"FAIR_QUEUES": value}):
            return {m.id: m.msg for m in run_checks() if m.id and m.id.startswith("pqjobs")}

    assert (
        "'imprts'" in messages_for({"default": "tenant:{tenant}", "imprts": "t:{t}"})["pqjobs.W051"]
    )
    assert "next to each other" in messages_for({"default": "{a}{b}"})["pqjobs.E054"]
    assert "must be a dict of queue name" in messages_for(["default"])["pqjobs.E054"]
    assert "non-empty string" in messages_for({"": "t:{t}"})["pqjobs.E054"]
    with override_settings(PQJOBS={"FAIR_QUEUES": {"default": lambda payload: "k"}}):
        assert callable(conf.FAIR_QUEUES["default"])


def test_queue_rates_are_validated_and_unknown_queues_warned_about():
    from django.core.checks import run_checks

    with override_settings(PQJOBS={"QUEUE_RATES": {"default": "5/s", "emial": "100/m"}}):
        messages = {m.id: m.msg for m in run_checks() if m.id and m.id.startswith("pqjobs")}
    assert "'emial'" in messages["pqjobs.W050"]
    with override_settings(PQJOBS={"QUEUE_RATES": {"default": "fast"}}):
        messages = {m.id: m.msg for m in run_checks() if m.id and m.id.startswith("pqjobs")}
    assert "'100/m'" in messages["pqjobs.E051"]


def test_a_refused_metrics_token_is_not_repeated_in_the_check_message():
    secret = "s3cret-but-with a space-in-the-middle-of-it"
    with override_settings(PQJOBS={"METRICS_TOKEN": secret}):
        messages = [m.msg for m in run_checks() if m.id == "pqjobs.E073"]
    assert messages and "whitespace" in messages[0]
    assert "s3cret" not in messages[0]
    with override_settings(PQJOBS={"METRICS_TOKEN": "s3cret"}):
        messages = [m.msg for m in run_checks() if m.id == "pqjobs.E073"]
    assert messages and "at least 32 characters long, got 6" in messages[0]
    assert "s3cret" not in messages[0]


def test_metrics_access_defaults_and_a_good_token():
    with override_settings(PQJOBS={}):
        assert (conf.METRICS_TOKEN, conf.METRICS_PUBLIC) == (None, False)
    token = "Abc-._~+/" * 4 + "=="  # every character RFC 6750 allows in a bearer token
    assert check_ids(METRICS_TOKEN=token, METRICS_PUBLIC=True) == set()
    with override_settings(PQJOBS={"METRICS_TOKEN": token}):
        configured = conf.METRICS_TOKEN
    assert configured == token


# --- handlers --------------------------------------------------------------------------------


def takes_nothing():
    return None


def takes_two(ctx, order_id):
    return None


async def takes_a_keyword(*, ctx):
    return None


def takes_defaults(ctx, retries=3, *, verbose=False):
    return None


class CallableHandler:
    def __call__(self, ctx):
        return None


class CallableWithoutArguments:
    def __call__(self):
        return None


@pytest.fixture
def declare() -> Iterator[Callable[[str, Callable[..., Any]], None]]:
    """``declare(name, handler)``: a job type registered for one test."""
    names: list[str] = []

    def register(name: str, handler: Callable[..., Any]) -> None:
        names.append(name)
        job(name)(handler)

    yield register
    for name in names:
        registry.unregister(name)


def test_a_handler_that_cannot_take_the_context_fails_check(declare):
    declare("unit.nothing", takes_nothing)
    declare("unit.two", takes_two)
    declare("unit.keyword", takes_a_keyword)
    declare("unit.instance", CallableWithoutArguments())
    with pytest.raises(SystemCheckError) as caught:
        call_command("check")
    assert str(caught.value).count("(pqjobs.E091)") == 4
    here = "tests.unit.test_conf_and_checks"
    messages = {m.obj: m.msg for m in run_checks() if m.id == "pqjobs.E091"}
    assert messages == {
        f"{here}.takes_nothing": "the handler of job type 'unit.nothing', takes_nothing(), "
        "cannot take the job's context as its one argument: too many positional arguments",
        f"{here}.takes_two": "the handler of job type 'unit.two', takes_two(ctx, order_id), "
        "cannot take the job's context as its one argument: missing a required argument: "
        "'order_id'",
        f"{here}.takes_a_keyword": "the handler of job type 'unit.keyword', "
        "takes_a_keyword(*, ctx), cannot take the job's context as its one argument: too many "
        "positional arguments",
        f"{here}.CallableWithoutArguments": "the handler of job type 'unit.instance', "
        "CallableWithoutArguments(), cannot take the job's context as its one argument: too "
        "many positional arguments",
    }
    [hint] = {m.hint for m in run_checks() if m.id == "pqjobs.E091"}
    assert hint == (
        "A handler takes one positional argument, the JobContext: def handler(ctx): ...; it "
        "reads the job's data from ctx.job.payload. With typed arguments, a second: def "
        "handler(ctx, args: Receipt): ..."
    )


def test_handlers_that_take_the_context_pass_the_check(declare):
    @functools.wraps(takes_two)
    def wrapper(ctx):  # a decorator's: what the worker calls takes the context alone
        return takes_two(ctx, None)

    declare("unit.defaults", takes_defaults)
    declare("unit.anything", lambda *args, **kwargs: None)
    declare("unit.wrapper", wrapper)
    declare("unit.partial", functools.partial(takes_defaults, retries=1))
    declare("unit.instance", CallableHandler())
    assert [m for m in run_checks() if m.id == "pqjobs.E091"] == []

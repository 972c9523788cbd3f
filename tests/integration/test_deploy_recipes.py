"""The deploy and autoscaling recipes of docs/guides/production.md, checked as far as this
machine allows (issue 32): the systemd unit by ``systemd-analyze verify``, the Kubernetes
YAML parsed, and the autoscaler's Prometheus queries evaluated against a real scrape of the
metrics view beside known jobs. (No Kubernetes cluster is at hand to apply them.)"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
import yaml
from django.db.models import F

from django_pqjobs import enqueue_many
from django_pqjobs.conf import conf
from django_pqjobs.models import Job
from tests.helpers import ROOT, bound, documented_block

pytestmark = pytest.mark.django_db(transaction=True)

DOC = "guides/production.md"

# What the recipes' queries use of PromQL: an aggregation of one metric's series chosen
# by label equality.
_QUERY = re.compile(r"^(sum|max)\((\w+)\{([^}]*)\}\)$")
_MATCHER = re.compile(r'(\w+)="([^"]*)"')
_SAMPLE = re.compile(r"^(\w+)(?:\{([^}]*)\})? (\S+)$")


def evaluate(query: str, scrape: str) -> float:
    """``sum(...)`` / ``max(...)`` of the series of one metric whose labels match, over a
    scrape in Prometheus' text format (what Prometheus would answer right after it)."""
    found = _QUERY.match(query)
    assert found is not None, f"not a query these recipes use: {query}"
    aggregate, metric, matchers = found.groups()
    wanted = dict(_MATCHER.findall(matchers))
    values = []
    for line in scrape.splitlines():
        sample = _SAMPLE.match(line)
        if sample is None or sample.group(1) != metric:
            continue
        labels = dict(_MATCHER.findall(sample.group(2) or ""))
        if all(labels.get(k) == v for k, v in wanted.items()):
            values.append(float(sample.group(3)))
    assert values, f"{query}: the metrics view has no such series"
    return sum(values) if aggregate == "sum" else max(values)


def test_the_keda_queries_measure_the_due_jobs_and_the_lag(admin_client):
    deployment = yaml.safe_load(documented_block(DOC, "k8s-deployment", "yaml"))
    scaled = yaml.safe_load(documented_block(DOC, "keda", "yaml"))
    assert (scaled["apiVersion"], scaled["kind"]) == ("keda.sh/v1alpha1", "ScaledObject")
    assert scaled["spec"]["scaleTargetRef"]["name"] == deployment["metadata"]["name"]
    spec = scaled["spec"]
    assert 1 <= spec["minReplicaCount"] <= spec["maxReplicaCount"]
    grace = deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    assert grace > conf.SHUTDOWN_TIMEOUT
    queries = {}
    for trigger in spec["triggers"]:
        assert trigger["type"] == "prometheus"
        float(trigger["metadata"]["threshold"])  # KEDA wants the number as a string
        queries[trigger["metadata"]["query"].split("(")[0]] = trigger["metadata"]["query"]
    assert set(queries) == {"sum", "max"}

    # 7 due jobs (the oldest due for 40 s), 3 delayed, 2 due in another queue
    enqueue_many("tests.noop", [{}] * 7)
    Job.objects.update(run_after=F("run_after") - timedelta(seconds=40))
    enqueue_many("tests.noop", [{}] * 3, delay=3600)
    enqueue_many("tests.noop", [{}] * 2, queue="other")
    scrape = admin_client.get("/metrics").content.decode()
    assert evaluate(queries["sum"], scrape) == 7
    assert 40 <= evaluate(queries["max"], scrape) < 60


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="no systemd-analyze")
def test_the_systemd_unit_verifies_without_a_warning(tmp_path: Path):
    """As an instance (``jobs@1``), with this machine's paths in place of /srv/app (the
    verifier checks that the program exists) and a user that exists here."""
    unit = documented_block(DOC, "systemd-worker", "ini")
    unit = unit.replace("/srv/app/.venv/bin/python", sys.executable)
    unit = unit.replace("/srv/app", str(ROOT)).replace("User=app", "User=postgres")
    path = tmp_path / "jobs@1.service"
    path.write_text(unit)
    done = subprocess.run(
        ["systemd-analyze", "verify", str(path)], capture_output=True, text=True, timeout=bound(60)
    )
    assert done.returncode == 0, done.stderr
    # unknown keys and bad values are only warned about: none may be
    warnings = [line for line in done.stderr.splitlines() if str(path) in line]
    assert warnings == []

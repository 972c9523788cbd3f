"""Tasks framework: ``task.enqueue()`` against ``enqueue_job``, and a drain of no-op ``@task``
jobs against a drain of no-op native jobs, measured in the same run.

Enqueue: seven rounds of 1,000 single enqueues (one per transaction) each of ``enqueue_job``
and of a no-op task of each framework installed, taking turns call by call. Drain: nine
rounds, each draining 10,000 jobs of every contender (native, then each framework's) with
one ``run_jobs --concurrency 4 --burst`` (rates on the database clock, from the first job
finished to the last). Each round starts with the next contender, so none always goes
first. Targets: the median of the rounds' ratios (task / native) at least 90 %; the figures
are medians. The notes add the worker's CPU time per job over the same span, which the
machine's other load disturbs less than the rates.
"""

from __future__ import annotations

import importlib
import os
import statistics
import subprocess
import threading
import time
from typing import Any

from django.apps import apps

from django_pqjobs import enqueue_job, enqueue_many
from django_pqjobs.models import Job

from ..harness import Result, reset_tables, sql, worker_process

APPS = {"django.tasks": "tests.tasks_builtin", "django_tasks": "tests.tasks_backport"}
TARGET = 0.9


def noop_tasks() -> dict[str, Any]:
    """The no-op task of each framework whose test app is installed."""
    return {
        family: importlib.import_module(f"{app}.tasks").noop
        for family, app in APPS.items()
        if apps.is_installed(app)
    }


def enqueue_rounds(rounds: int, per_round: int, tasks: dict[str, Any]) -> dict[str, list[float]]:
    """Enqueue rates per round. The contenders take turns call by call, so a change in the
    machine's speed (its commits drift by 10-20 % from one minute to the next) hits all."""
    enqueuers = {"enqueue_job": lambda n: enqueue_job("tests.noop", {"n": n})}
    for family, task in tasks.items():
        enqueuers[family] = lambda n, task=task: task.enqueue(n)
    rates: dict[str, list[float]] = {name: [] for name in enqueuers}
    for round_ in range(rounds):
        order = _rotated(list(enqueuers), round_)
        spent = dict.fromkeys(order, 0.0)
        for n in range(per_round):
            for name in order:
                started = time.perf_counter()
                enqueuers[name](n)
                spent[name] += time.perf_counter() - started
        for name in order:
            rates[name].append(per_round / spent[name])
    return rates


def _rotated(names: list[str], by: int) -> list[str]:
    """Each round starts with the next contender, so none always goes first."""
    by %= len(names)
    return names[by:] + names[:by]


def drain(job_type: str) -> tuple[float, float]:
    """Drain what is enqueued with one burst worker: jobs/s on the database clock, and the
    worker's CPU time per job in µs.

    Both count from the first job finished to the last, so the worker's start and its
    one-time work on its first task (finding the task, importing its module) are left out.
    The CPU time comes from sampling the worker's /proc counters as it runs.
    """
    samples: list[tuple[float, float]] = []
    with worker_process("--concurrency", "4", "--burst") as process:
        sampler = threading.Thread(target=_sample_cpu, args=(process, samples), daemon=True)
        sampler.start()
        process.wait(600)
        sampler.join(5)
    (jobs, first, last, left) = sql(
        "SELECT count(*) FILTER (WHERE finished_at > first.at), extract(epoch FROM first.at), "
        "extract(epoch FROM max(finished_at)), count(*) FILTER (WHERE status <> 'done') "
        "FROM pqjobs_job_hot, (SELECT min(finished_at) AS at FROM pqjobs_job_hot) AS first "
        "WHERE job_type = %s GROUP BY first.at",
        [job_type],
    )[0]
    if process.returncode != 0 or left:
        raise RuntimeError(f"drain of {job_type} failed: exit {process.returncode}, {left} left")
    seconds = float(last) - float(first)
    cpu = _cpu_at(samples, float(last)) - _cpu_at(samples, float(first))
    return jobs / seconds, cpu / jobs * 1e6


_TICK = os.sysconf("SC_CLK_TCK")


def _sample_cpu(process: subprocess.Popen, samples: list[tuple[float, float]]) -> None:
    """(wall clock, CPU seconds of the process) every 2 ms until it exits."""
    stat = f"/proc/{process.pid}/stat"
    while process.poll() is None:
        try:
            with open(stat) as file:
                fields = file.read().rsplit(")", 1)[1].split()
        except OSError:
            return
        samples.append((time.time(), (int(fields[11]) + int(fields[12])) / _TICK))
        time.sleep(0.002)


def _cpu_at(samples: list[tuple[float, float]], moment: float) -> float:
    """The process's CPU seconds at ``moment`` (the last sample taken before it)."""
    before = [cpu for at, cpu in samples if at <= moment]
    return before[-1] if before else 0.0


def drain_rounds(
    rounds: int, jobs: int, tasks: dict[str, Any]
) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Rates (jobs/s) and the worker's CPU per job (µs) per round."""
    # Task jobs are the rows task.enqueue() writes, inserted in bulk (enqueue is timed above).
    task_call = {"args": [], "kwargs": {}, "task_backend": "default"}
    contenders: dict[str, tuple[str, dict]] = {"native": ("tests.noop", {})}
    for family, task in tasks.items():
        contenders[family] = (task.module_path, task_call)
    rates: dict[str, list[float]] = {name: [] for name in contenders}
    cpu: dict[str, list[float]] = {name: [] for name in contenders}
    for round_ in range(rounds):
        for name in _rotated(list(contenders), round_):
            job_type, payload = contenders[name]
            reset_tables()
            enqueue_many(job_type, [payload] * jobs)
            rate, cpu_per_job = drain(job_type)
            rates[name].append(rate)
            cpu[name].append(cpu_per_job)
    return rates, cpu


def _ratios(ours: list[float], reference: list[float]) -> list[float]:
    """Per-round ratios: the two figures of a round were measured minutes apart at most."""
    return [mine / theirs for mine, theirs in zip(ours, reference, strict=True)]


def run(quick: bool) -> list[Result]:
    tasks = noop_tasks()
    if not tasks:
        return [Result("tasks: no Tasks framework installed", 0, "-", "-", None)]
    reset_tables()
    rounds, per_round = (3, 400) if quick else (7, 1_000)
    enqueued = enqueue_rounds(rounds, per_round, tasks)
    assert Job.objects.count() == rounds * per_round * (1 + len(tasks))
    drain_count, drain_repeats = (5_000, 3) if quick else (10_000, 9)
    drained, cpu = drain_rounds(drain_repeats, drain_count, tasks)
    reset_tables()

    results = [
        Result(
            "tasks: enqueue_job, one per transaction (reference)",
            statistics.median(enqueued["enqueue_job"]),
            "jobs/s",
            "-",
            None,
            notes=f"median of {rounds} rounds of {per_round}",
            extra={"rounds": enqueued["enqueue_job"]},
        ),
        Result(
            f"tasks: drain of {drain_count} native no-op jobs (reference)",
            statistics.median(drained["native"]),
            "jobs/s",
            "-",
            None,
            notes=f"median of {drain_repeats} drains; worker CPU per job "
            f"{statistics.median(cpu['native']):.1f} µs",
            extra={"rounds": drained["native"], "cpu_us": cpu["native"]},
        ),
    ]
    for family in tasks:
        enqueue_ratios = _ratios(enqueued[family], enqueued["enqueue_job"])
        drain_ratios = _ratios(drained[family], drained["native"])
        enqueue_ratio = statistics.median(enqueue_ratios)
        drain_ratio = statistics.median(drain_ratios)
        results += [
            Result(
                f"tasks: {family} task.enqueue(), one per transaction",
                statistics.median(enqueued[family]),
                "jobs/s",
                ">= 90% of enqueue_job",
                enqueue_ratio >= TARGET,
                notes=f"{enqueue_ratio:.0%} of enqueue_job (median of the rounds' ratios, "
                f"{min(enqueue_ratios):.0%}-{max(enqueue_ratios):.0%})",
                extra={"rounds": enqueued[family], "ratios": enqueue_ratios},
            ),
            Result(
                f"tasks: {family} drain of {drain_count} no-op @task jobs",
                statistics.median(drained[family]),
                "jobs/s",
                ">= 90% of native",
                drain_ratio >= TARGET,
                notes=f"{drain_ratio:.0%} of the native drain (median of the rounds' ratios, "
                f"{min(drain_ratios):.0%}-{max(drain_ratios):.0%}); worker CPU per job "
                f"{statistics.median(cpu[family]):.1f} µs",
                extra={"rounds": drained[family], "ratios": drain_ratios, "cpu_us": cpu[family]},
            ),
        ]
    return results

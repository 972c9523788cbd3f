"""Screenshots of the operator console for docs/guides/operating.md, from the real admin.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/pqjobs_shots \
        .venv/bin/python scripts/admin_screenshots.py [--rows 1000000] [--out docs/images]

The database is emptied and filled: ``--rows`` historical jobs in one INSERT ... SELECT,
then real jobs run by a real worker (failures with tracebacks, retries, a chain, a long
job reporting progress). The example project's admin is served by ``runserver`` and
photographed by Debian's Chromium through Playwright. Timings of the pages are printed.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "testproject"))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

import django  # noqa: E402

django.setup()

from django.contrib.auth import get_user_model  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402

from django_pqjobs import JobContext, PermanentError, enqueue_job, flow, job  # noqa: E402
from django_pqjobs.models import Job  # noqa: E402
from django_pqjobs.worker.worker import Worker  # noqa: E402

CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
PORT = 8765
FULL_PAGE = {"admin-job-failed.png", "admin-job-running.png"}

HISTORY = """
INSERT INTO pqjobs_job (job_type, queue, payload, status, priority, attempts, max_attempts,
                        run_after, last_error, error_type, created_at, updated_at, finished_at,
                        duration_ms, locked_by)
SELECT t.job_type, t.queue, jsonb_build_object('id', g), s.status, 0, s.attempts, 5, at.v,
       CASE WHEN s.status = 'failed' THEN
         'Traceback (most recent call last):' || chr(10) || '  ...' || chr(10)
         || 'TimeoutError: upstream did not answer in 30 s' ELSE '' END,
       CASE WHEN s.status = 'failed' THEN 'TimeoutError' ELSE '' END,
       at.v, at.v, at.v + interval '1 second', 40 + (g * 7919) %% 900, 'web-1-4242-a1b2c3'
FROM generate_series(1::bigint, %(rows)s) g,
     LATERAL (SELECT (ARRAY['emails.send_receipt', 'billing.charge_card', 'images.thumbnail',
                            'reports.daily', 'search.reindex_product'])[1 + g %% 5] AS job_type,
                     CASE WHEN g %% 5 = 0 THEN 'emails' ELSE 'default' END AS queue) t,
     LATERAL (SELECT now() - interval '2 minutes'
                     - make_interval(secs => (%(rows)s - g) * 86400.0 / %(rows)s
                                             * (1 + 0.3 * sin(g / 500.0))) AS v) at,
     LATERAL (SELECT CASE WHEN (g * 31) %% 997 = 0 OR (t.job_type = 'billing.charge_card'
                                AND (g * 13) %% 211 = 0) THEN 'failed'
                          -- a payment gateway outage 25 to 18 minutes ago
                          WHEN t.job_type = 'billing.charge_card' AND g %% 3 > 0
                               AND at.v BETWEEN now() - interval '25 minutes'
                                            AND now() - interval '18 minutes' THEN 'failed'
                          ELSE 'done' END AS status,
                     CASE WHEN (g * 31) %% 997 = 0 THEN 5 ELSE 1 END AS attempts) s
"""


@job("billing.charge_card", max_attempts=3, backoff=[1, 1])
def charge_card(ctx: JobContext) -> dict:
    if ctx.job.payload.get("declined"):
        raise PermanentError(f"card ending {ctx.job.payload['card']} was declined")
    if ctx.attempt < ctx.job.payload.get("succeed_on", 99):
        raise ConnectionError("payment gateway reset the connection")
    return {"charged": ctx.job.payload.get("amount")}


@job("emails.send_receipt", queue="emails")
@job("images.thumbnail")
def quick(ctx: JobContext) -> dict:
    return {"ok": True}


@job("reports.daily")
def daily_report(ctx: JobContext) -> dict:
    for region in ("eu", "us"):
        ctx.enqueue("search.reindex_product", {"region": region})
    return {"rows": 1234, "regions": 2}


@job("search.reindex_product")
def reindex(ctx: JobContext) -> dict:
    total = int(ctx.job.payload.get("products", 0))
    for done in range(total):
        ctx.set_progress(done, total, f"product {done} of {total}")
        time.sleep(0.5)
        ctx.raise_if_cancelled()
    return {"region": ctx.job.payload.get("region"), "indexed": total}


def fill(rows: int) -> None:
    call_command("migrate", verbosity=0)
    with connection.cursor() as cursor:
        cursor.execute("TRUNCATE pqjobs_job, pqjobs_attempt, pqjobs_worker")
        started = time.perf_counter()
        cursor.execute(HISTORY, {"rows": rows})
        cursor.execute("ANALYZE pqjobs_job")
        print(f"{rows:,} historical jobs inserted in {time.perf_counter() - started:.1f} s")
    user_model = get_user_model()
    if not user_model.objects.filter(username="admin").exists():
        user_model.objects.create_superuser("admin", "admin@example.com", "admin")


def run_real_jobs() -> tuple[Worker, dict[str, int]]:
    ids = {
        "retried": enqueue_job("billing.charge_card", {"card": "4242", "amount": "19.90"}),
        "declined": enqueue_job("billing.charge_card", {"card": "0002", "declined": True}),
        "report": enqueue_job("reports.daily", {"day": "2026-11-21"}),
        "delayed": enqueue_job("emails.send_receipt", {"order_id": 7}, delay=3600),
        "xss": enqueue_job("billing.charge_card", {"card": "<script>alert(1)</script>"}),
    }
    worker = Worker(concurrency=4, shutdown_timeout=2, worker_id="web-1-4242-a1b2c3")
    worker.run_in_thread("screenshots-worker")
    deadline = time.monotonic() + 30
    while (
        Job.objects.filter(pk__in=[ids["retried"], ids["declined"], ids["xss"]])
        .exclude(status="failed")
        .exists()
    ):
        if time.monotonic() > deadline:
            raise SystemExit("the demo jobs did not fail in time")
        time.sleep(0.2)
    # The pages as the guide shows them: a paused queue (its banner, its Resume button).
    flow.pause_queue("emails", by="admin")
    ids["indexing"] = enqueue_job("search.reindex_product", {"region": "eu", "products": 400})
    while not (Job.objects.get(pk=ids["indexing"]).progress or {}).get("done"):
        time.sleep(0.2)
    time.sleep(3)  # some progress, and a heartbeat
    return worker, ids


def shoot(out: Path, ids: dict[str, int]) -> None:
    from playwright.sync_api import sync_playwright

    base = f"http://127.0.0.1:{PORT}/admin/"
    shots = {
        "admin-job-list.png": f"{base}django_pqjobs/job/",
        "admin-failed-jobs.png": f"{base}django_pqjobs/job/?status__exact=failed",
        "admin-job-failed.png": f"{base}django_pqjobs/job/{ids['retried']}/change/",
        "admin-job-running.png": f"{base}django_pqjobs/job/{ids['indexing']}/change/",
        "admin-dashboard.png": f"{base}django_pqjobs/job/dashboard/",
    }
    with sync_playwright() as playwright, tempfile.TemporaryDirectory() as profile:
        context = playwright.chromium.launch_persistent_context(
            profile,
            executable_path="/usr/bin/chromium",
            headless=True,
            args=CHROMIUM_ARGS,
            viewport={"width": 1600, "height": 1000},
        )
        page = context.new_page()
        page.goto(f"{base}login/")
        page.fill("#id_username", "admin")
        page.fill("#id_password", "admin")
        page.click("input[type=submit]")
        page.wait_for_url(f"{base}")
        page.evaluate("localStorage.setItem('django.admin.navSidebarIsOpen', 'false')")
        for name, url in shots.items():
            for _ in range(2):  # the second load is the one timed (warm caches)
                started = time.perf_counter()
                page.goto(url)
                elapsed = time.perf_counter() - started
            print(f"{name:<28} {elapsed * 1000:6.0f} ms  {url}")
            page.screenshot(path=str(out / name), full_page=name in FULL_PAGE)
        # A bulk action and its message.
        page.goto(shots["admin-failed-jobs.png"])
        page.locator("#action-toggle").check()
        page.select_option("select[name=action]", "retry_action")
        page.click("button[name=index]")
        page.wait_for_selector("ul.messagelist")
        page.screenshot(path=str(out / "admin-bulk-retry.png"))
        context.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "images")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    fill(args.rows)
    worker, ids = run_real_jobs()
    server = subprocess.Popen(
        [sys.executable, "manage.py", "runserver", f"127.0.0.1:{PORT}", "--noreload"],
        cwd=ROOT / "testproject",
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        for _ in range(100):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{PORT}/admin/login/", timeout=1)
                break
            except OSError:
                time.sleep(0.2)
        shoot(args.out, ids)
    finally:
        server.terminate()
        server.wait(10)
        worker.stop()
        if worker.thread is not None:
            worker.thread.join(15)
    print(f"screenshots in {args.out}")


if __name__ == "__main__":
    main()

"""Example job handlers, autodiscovered by django-pqjobs because this app is installed."""

import logging
import random

from django.utils import timezone

from django_pqjobs import JobContext, PermanentError, Retry, job

from .models import Order

log = logging.getLogger(__name__)


@job("send_receipt", queue="emails", max_attempts=5, timeout=60)
def send_receipt(ctx: JobContext) -> dict:
    """Succeeds: 'sends' a receipt and marks the order. Idempotent: a re-run sends nothing."""
    order = Order.objects.get(pk=ctx.job.payload["order_id"])
    if order.receipt_sent_at is None:
        order.receipt_sent_at = timezone.now()
        order.save(update_fields=["receipt_sent_at"])
    return {"order_id": order.pk, "to": order.email}


@job("flaky_report", max_attempts=4, backoff=[1, 2, 4])
def flaky_report(ctx: JobContext) -> dict:
    """Fails its first two attempts (a flaky upstream), then succeeds."""
    if ctx.attempt <= ctx.job.payload.get("fail_times", 2):
        raise Retry(f"upstream busy on attempt {ctx.attempt}", delay=1)
    ctx.enqueue("summarize", {"report": ctx.job.payload.get("name", "weekly")})
    return {"rows": random.randint(100, 999), "attempt": ctx.attempt}


@job("summarize", priority=10)
def summarize(ctx: JobContext) -> dict:
    """A chained job, enqueued by flaky_report."""
    return {"summary_of": ctx.job.payload["report"]}


@job("import_contacts", max_attempts=3)
def import_contacts(ctx: JobContext) -> None:
    """Fails for good: the payload points at a file that does not exist."""
    path = ctx.job.payload.get("path", "")
    raise PermanentError(f"cannot import contacts: {path!r} does not exist")


@job("order_stats")
def order_stats(ctx: JobContext) -> dict:
    """A recurring job: the schedule 'order-stats' in PQJOBS["SCHEDULES"] (config/settings.py)
    enqueues it every minute. Counts the orders and the receipts sent so far."""
    orders = Order.objects.all()
    return {
        "orders": orders.count(),
        "receipts_sent": orders.filter(receipt_sent_at__isnull=False).count(),
    }


@job("count_unsent_receipts", cron="0 3 * * *", timezone="UTC")
def count_unsent_receipts(ctx: JobContext) -> dict:
    """A recurring job: every night at 03:00 UTC, count the orders still without a receipt."""
    return {"unsent": Order.objects.filter(receipt_sent_at__isnull=True).count()}

"""Two ways to enqueue from a view."""

from decimal import Decimal, InvalidOperation

from django.db import transaction
from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from django_pqjobs import enqueue_job, enqueue_on_commit

from .models import Order


@csrf_exempt
@require_POST
def place_order(request: HttpRequest) -> JsonResponse:
    """Creates an order and enqueues its receipt only if the transaction commits."""
    email = request.POST.get("email", "")
    try:
        total = Decimal(request.POST.get("total", "0"))
    except InvalidOperation:
        return JsonResponse({"error": "total must be a number"}, status=400)
    if "@" not in email:
        return JsonResponse({"error": "email is required"}, status=400)
    with transaction.atomic():
        order = Order.objects.create(email=email, total=total)
        enqueue_on_commit("send_receipt", {"order_id": order.pk})
    return JsonResponse({"order_id": order.pk}, status=201)


@csrf_exempt
@require_POST
def request_report(request: HttpRequest) -> JsonResponse:
    """Enqueues a report at once; the same name twice returns the same active job."""
    name = request.POST.get("name", "weekly")[:100]
    job_id = enqueue_job("flaky_report", {"name": name}, dedupe_key=f"report:{name}")
    return JsonResponse({"job_id": job_id}, status=202)

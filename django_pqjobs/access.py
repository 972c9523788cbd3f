"""Who may read the queue's insides over HTTP: the metrics view, and the health view's details.

An observer is an active staff user (the session of the admin) or a request that carries
``PQJOBS['METRICS_TOKEN']`` as ``Authorization: Bearer <token>`` (Prometheus, an uptime
monitor). Everyone else gets the metrics view's refusal and the health view's status alone:
job types, queues, worker ids, host names and database errors are not for the internet.
"""

from __future__ import annotations

import hmac

from django.http import HttpRequest, HttpResponse
from django.utils.cache import patch_vary_headers

from .conf import conf

__all__ = ["has_token", "is_observer", "is_staff", "refusal", "vary_on_credentials"]


def _bearer_token(request: HttpRequest) -> bytes | None:
    """The credentials of an ``Authorization: Bearer ...`` header, or None."""
    header = request.META.get("HTTP_AUTHORIZATION", "")
    scheme, _, credentials = header.strip().partition(" ")
    if scheme.lower() != "bearer" or not credentials.strip():
        return None
    # Headers are text decoded as Latin-1, or anything a test client sends: never fail here.
    return credentials.strip().encode("utf-8", "surrogatepass")


def has_token(request: HttpRequest) -> bool:
    """Does ``request`` carry the configured ``METRICS_TOKEN``? (False when none is set.)"""
    token = conf.METRICS_TOKEN
    offered = _bearer_token(request)
    if token is None or offered is None:
        return False
    return hmac.compare_digest(offered, token.encode())


def is_staff(request: HttpRequest) -> bool:
    """Is the request's user an active staff user? (False without the auth middleware.)"""
    user = getattr(request, "user", None)
    return bool(getattr(user, "is_active", False) and getattr(user, "is_staff", False))


def is_observer(request: HttpRequest) -> bool:
    """May ``request`` see the queue's details: an active staff user, or the token."""
    return has_token(request) or is_staff(request)


def refusal() -> HttpResponse:
    """401 with a Bearer challenge when a token is configured (so clients know to send
    it), else 403."""
    if conf.METRICS_TOKEN is None:
        response = HttpResponse(
            "forbidden: staff only\n", status=403, content_type="text/plain; charset=utf-8"
        )
    else:
        response = HttpResponse(
            "unauthorized: send the metrics token as a bearer token\n",
            status=401,
            content_type="text/plain; charset=utf-8",
        )
        response["WWW-Authenticate"] = 'Bearer realm="pqjobs"'
    return vary_on_credentials(response)


def vary_on_credentials(response: HttpResponse) -> HttpResponse:
    """Tell caches the answer depends on who asks."""
    patch_vary_headers(response, ["Authorization", "Cookie"])
    return response

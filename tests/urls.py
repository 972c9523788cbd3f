from django.contrib import admin
from django.urls import include, path

from django_pqjobs.health import health_view
from django_pqjobs.metrics import metrics_view

urlpatterns = [
    path("admin/", admin.site.urls),
    path("shop/", include("tests.shop_urls")),
    path("metrics", metrics_view),
    path("health/jobs", health_view),
    path("health/jobs/lag", health_view, {"min_workers": 0, "max_lag": 60, "queues": ["slow"]}),
]

from django.db import models


class Effect(models.Model):
    """One row per job execution that reached its side effect.

    The unique key proves "exactly once" in the drain tests: a second run of the same job
    would raise IntegrityError and show up as a failed attempt.
    """

    key = models.CharField(max_length=200, unique=True)
    worker = models.CharField(max_length=200, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return self.key


class Counter(models.Model):
    name = models.CharField(max_length=100, unique=True)
    value = models.IntegerField(default=0)

    def __str__(self) -> str:
        return f"{self.name}={self.value}"

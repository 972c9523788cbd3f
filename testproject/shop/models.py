from django.db import models


class Order(models.Model):
    email = models.EmailField()
    total = models.DecimalField(max_digits=10, decimal_places=2)
    receipt_sent_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"Order {self.pk} ({self.email})"

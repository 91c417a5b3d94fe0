from django.db import models


class Order(models.Model):
    total = models.PositiveIntegerField()
    created_at = models.DateTimeField(auto_now_add=True)

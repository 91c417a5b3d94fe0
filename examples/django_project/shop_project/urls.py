"""``POST /orders?total=42`` places an order (see ``shop.views``)."""

from django.urls import path
from shop import views

urlpatterns = [path("orders", views.place_order)]

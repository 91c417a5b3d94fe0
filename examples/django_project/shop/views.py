from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from shop.orders import place_order as place


@csrf_exempt  # an example API without sessions
@require_POST
def place_order(request: HttpRequest) -> JsonResponse:
    order = place(int(request.GET.get("total", "0")))
    return JsonResponse({"id": order.pk, "total": order.total}, status=201)

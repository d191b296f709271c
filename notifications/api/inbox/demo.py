"""/inbox/demo/: a page where a person picks a demo user, watches <ntf-inbox> and sends it a
notification. Served with DEBUG, or with INBOX_DEMO=true; a 404 otherwise."""

from __future__ import annotations

from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect, JsonResponse
from django.shortcuts import render
from django.urls import reverse
from django.utils.http import urlencode
from django.views.decorators.http import require_GET, require_POST

from ...conf import get_config
from ...errors import ValidationFailed
from ...services import inbox as inbox_services

PAGE = "notifications/inbox_demo.html"


def _enabled() -> None:
    if not get_config().inbox.demo:
        raise Http404("the inbox demo is off (INBOX_DEMO)")


@require_GET
def inbox_demo(request: HttpRequest) -> HttpResponse:
    _enabled()
    user_id = request.GET.get("user", "")
    context = {"users": inbox_services.DEMO_USERS, "user_id": "", "token": ""}
    if user_id:
        try:
            context["token"], _ = inbox_services.inbox_demo_token(user_id=user_id)
        except ValidationFailed as exc:
            return render(request, PAGE, {**context, "error": exc.message}, status=400)
        context["user_id"] = user_id
    return render(request, PAGE, context)


@require_GET
def inbox_demo_token(request: HttpRequest) -> JsonResponse:
    """A fresh token for the page's user, fetched by <ntf-inbox token-url> when its token expires."""
    _enabled()
    try:
        token, expires_at = inbox_services.inbox_demo_token(user_id=request.GET.get("user", ""))
    except ValidationFailed as exc:
        return JsonResponse({"error": exc.message}, status=400)
    return JsonResponse({"token": token, "expires_at": expires_at.isoformat()}, headers={"Cache-Control": "no-store"})


@require_POST
def inbox_demo_send(request: HttpRequest) -> HttpResponse:
    _enabled()
    user_id = request.POST.get("user", "")
    try:
        inbox_services.inbox_demo_send(user_id=user_id, subject=request.POST.get("subject", ""))
    except ValidationFailed as exc:
        return render(request, PAGE, {"users": inbox_services.DEMO_USERS, "error": exc.message}, status=400)
    return HttpResponseRedirect(f"{reverse('inbox-demo')}?{urlencode({'user': user_id})}")

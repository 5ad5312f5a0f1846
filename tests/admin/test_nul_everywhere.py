"""A NUL character (``%00``), which no PostgreSQL text can hold, in any query parameter or
object key of any of the app's admin pages answers 200, 302, 400, 403, 404 or 405: never HTTP 500."""

from __future__ import annotations

from collections.abc import Iterator
from urllib.parse import quote, urlencode

import pytest
from django.contrib import admin
from django.contrib.auth.models import User
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver, reverse

from django_lonnymq import enqueue

from .conftest import make_dead

NUL_VALUES = ["\x00", "a\x00b"]
# Parameters the app's admin views read themselves, besides their list filters and search.
OWN_PARAMS = ["q", "queue", "channel", "channel_name", "minutes", "database", "o", "p", "_changelist_filters"]
# A NUL in a parameter's name, alone and beside a filter.
NAME_PARAMS = [{"a\x00b": "1"}, {"\x00": "1", "queue": "q"}]
# 403: a page the admin refuses to everyone (deleting a read-only row); 405: a GET of a
# POST-only action.
ANSWERS = {200, 302, 400, 403, 404, 405}


def _app_routes(patterns: list[URLPattern | URLResolver], prefix: str = "") -> Iterator[tuple[str, str]]:
    for pattern in patterns:
        if isinstance(pattern, URLResolver):
            yield from _app_routes(pattern.url_patterns, prefix + str(pattern.pattern))
        elif pattern.name and pattern.name.startswith("django_lonnymq_"):
            yield str(pattern.name), prefix + str(pattern.pattern)


def _app_models() -> list[type]:
    return [model for model in admin.site._registry if model._meta.app_label == "django_lonnymq"]


@pytest.fixture
def superuser_client(db: None) -> Client:
    user = User.objects.create_superuser("nul-walker", "nul@example.com", "pw")
    client = Client(raise_request_exception=False)
    client.force_login(user)
    return client


@pytest.fixture
def rows(db: None) -> None:
    enqueue("t_nul", {"n": 1}, channel="acme")
    make_dead()


def _filter_params(client: Client, changelist: str) -> set[str]:
    """The parameters of a changelist's filters (as Django's list_filter names them)."""
    response = client.get(changelist)
    assert response.status_code == 200, (changelist, response.status_code)
    names: set[str] = set()
    for spec in response.context["cl"].filter_specs:
        names.update(spec.expected_parameters())
    return names


@pytest.mark.slow  # over 3 s: make test runs it, make test-fast leaves it out
def test_every_changelist_filter_with_nul_is_not_a_server_error(superuser_client, rows):
    models = _app_models()
    assert len(models) >= 8  # channels, limits, messages, dead letters, plans, workers, ...
    answers: dict[str, int] = {}
    for model in models:
        changelist = reverse(f"admin:django_lonnymq_{model._meta.model_name}_changelist")
        for name in sorted(_filter_params(superuser_client, changelist) | set(OWN_PARAMS)):
            for value in NUL_VALUES:
                url = f"{changelist}?{urlencode({name: value})}"
                answers[url] = superuser_client.get(url).status_code
        for params in NAME_PARAMS:
            url = f"{changelist}?{urlencode(params)}"
            answers[url] = superuser_client.get(url).status_code
    dashboard = reverse("admin:django_lonnymq_channel_dashboard")
    for name in OWN_PARAMS:
        for value in NUL_VALUES:
            url = f"{dashboard}?{urlencode({name: value})}"
            answers[url] = superuser_client.get(url).status_code
    bad = {url: status for url, status in answers.items() if status not in ANSWERS}
    assert not bad, "\n".join(f"{status} {url}" for url, status in sorted(bad.items()))
    assert len(answers) > 100


def test_every_object_page_with_nul_in_its_key_is_not_a_server_error(superuser_client, rows):
    answers: dict[str, int] = {}
    routes = [
        (name, route)
        for name, route in _app_routes(get_resolver().url_patterns)
        if "<path:object_id>" in route
    ]
    assert len(routes) >= 8 * 4  # change, delete, history (and the workflows' own actions) of each model
    for name, route in routes:
        for key in NUL_VALUES:
            url = "/" + route.replace("<path:object_id>", quote(key))
            answers[f"GET {url}"] = superuser_client.get(url).status_code
            if name.endswith(("_delete", "_lq_cancel", "_lq_requeue_failed")):
                answers[f"POST {url}"] = superuser_client.post(url, {"post": "yes"}).status_code
    bad = {url: status for url, status in answers.items() if status not in ANSWERS}
    assert not bad, "\n".join(f"{status} {url}" for url, status in sorted(bad.items()))

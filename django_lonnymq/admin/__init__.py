"""The queue in the Django admin: one module per page, each registered when this package is
imported (Django's admin autodiscovery imports it).

- :mod:`.channels`: channels, their counts and limits, pause, resume, purge, delete; routes
  the dashboard
- :mod:`.messages` and :mod:`.dead_messages`: the read-only lists and their actions
- :mod:`.limits`: queue-wide limits; :mod:`.plans`: plans (named sets of limits); :mod:`.schedules`: periodic schedules;
  :mod:`.topics`: subscriptions and unrouted events; :mod:`.workers`: the worker list;
  :mod:`.workflows`: workflows, their graphs and actions
- :mod:`.dashboard`: the dashboard page; :mod:`.charts`: its SVG charts (pure drawing)
- :mod:`.common`: what the pages share (times, counts, permissions, batches, the rate field,
  the queue filter). Pages import it, never each other (the channel page routes the
  dashboard); nothing imports this package back.

Every write goes through :mod:`django_lonnymq.api` (one SQL function call each), never an
ORM ``save()``/``update()``/``delete()`` of the queue's tables: the functions keep the
scheduler's invariants. Every read that is not an ORM query runs a named statement of
``sql/stats.sql`` through :mod:`django_lonnymq.db`. Actions check Django permissions (a
view-only user sees no action and no editable field). Pages stay cheap on large tables: see
docs/admin.md, "How counts are made".
"""

from . import (  # noqa: F401 - importing a page registers it
    channels,
    dead_messages,
    limits,
    messages,
    plans,
    schedules,
    topics,
    workers,
    workflows,
)

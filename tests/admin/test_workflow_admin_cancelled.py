"""The workflows admin and a cancelled workflow with dead steps: no "requeue failed steps"
button, and the view and the list's action leave its steps dead (with a message), instead of
failing on requeue_failed_steps' refusal."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.test import Client
from django.urls import reverse

from django_lonnymq import Workflow, api
from django_lonnymq.models import DeadMessage

from .conftest import dequeue, fail

pytestmark = pytest.mark.django_db

LIST = reverse("admin:django_lonnymq_workflowrecord_changelist")


def make_cancelled() -> tuple[int, int]:
    flow = Workflow("doomed")
    first = flow.step("t_admin", {}, max_attempts=1)
    flow.step("t_admin", {}, after=[first])
    workflow_id = flow.start()
    row = dequeue("t_admin")[0]
    assert fail(row[0], row[8]) == "dead"
    api.cancel_workflow(workflow_id)
    assert api.workflow(workflow_id).state == "cancelled"
    return workflow_id, row[0]


def test_a_cancelled_workflow_with_dead_steps_offers_no_requeue_and_refuses_it_with_a_message(
    make_client: Callable[..., Client],
) -> None:
    workflow_id, step_id = make_cancelled()
    client = make_client("operator", ["view_workflowrecord", "change_workflowrecord"])
    page = reverse("admin:django_lonnymq_workflowrecord_change", args=[workflow_id])
    shown = client.get(page)
    assert shown.status_code == 200 and b"lq-workflow-requeue" not in shown.content
    requeue = reverse("admin:django_lonnymq_workflowrecord_lq_requeue_failed", args=[workflow_id])
    posted = client.post(requeue, follow=True)
    assert posted.status_code == 200
    assert f"Workflow {workflow_id} is cancelled: its failed steps stay dead." in posted.content.decode()
    action = client.post(LIST, {"action": "requeue_failed", ACTION_CHECKBOX_NAME: [workflow_id]}, follow=True)
    assert action.status_code == 200 and "Requeued 0 failed steps." in action.content.decode()
    assert DeadMessage.objects.filter(id=step_id).exists()
    assert api.workflow(workflow_id).state == "cancelled"

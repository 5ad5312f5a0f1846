"""Workflows in a real headless browser: the list filtered by state and tenant, one
workflow's page with its steps drawn as a graph coloured by state, the "requeue failed
steps" action resuming a failed workflow and the cancel action cancelling one. A view-only
user gets no action. Screenshots in ``/tmp/shots_workflows/`` (and ``test-output/``)."""

from __future__ import annotations

import shutil
from pathlib import Path

from django.contrib.auth.models import Permission, User
from django.db import connection

from django_lonnymq import Workflow, api
from django_lonnymq.workflows import chord

from .conftest import admin_page
from .test_browser import OUTPUT

SHOTS = Path("/tmp/shots_workflows")


def run_step(queue: str, ok: bool, output: str = '"ok"') -> None:
    """Stand in for a worker: lease one message of ``queue``, then ack it as a step or fail it
    for good (max_attempts 1)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT id, lease_token FROM lonnymq_dequeue_v1(%s::text, 1, 60000::bigint, 'browser'::text, 0::bigint, 100::bigint)",
            [queue],
        )
        [(message_id, token)] = cursor.fetchall()
        if ok:
            cursor.execute(
                "SELECT lonnymq_workflow_ack_v2(ARRAY[%s]::bigint[], ARRAY[%s]::uuid[], ARRAY[%s]::jsonb[], 0::bigint)",
                [message_id, token, output],
            )
        else:
            cursor.execute(
                "SELECT lonnymq_fail_v2(%s::bigint, %s::uuid, 'boom'::text, NULL::bigint, 'failed'::text,"
                " 1000::bigint, 1000::bigint, 0::bigint)",
                [message_id, token],
            )


def test_an_operator_sees_a_workflow_graph_and_requeues_and_cancels(  # type: ignore[no-untyped-def]
    live_server, browser
) -> None:
    User.objects.create_superuser("ops", "ops@example.com", "correct horse battery")
    viewer = User.objects.create_user("viewer", "v@example.com", "correct horse battery", is_staff=True)
    viewer.user_permissions.add(Permission.objects.get(codename="view_workflowrecord"))

    flow = Workflow("import", channel="tenant-acme")
    fetch = flow.step("wb_fetch", {}, name="fetch")
    parts = [
        flow.step("wb_parse", {"i": i}, name=f"parse {i}", after=[fetch], max_attempts=1) for i in range(3)
    ]
    chord(flow, parts, {"queue": "wb_merge", "payload": {}, "name": "merge"})
    failed_id = flow.start()
    run_step("wb_fetch", True)
    run_step("wb_parse", True)
    run_step("wb_parse", False)  # dead: the workflow fails, merge waits
    other = Workflow("report", channel="tenant-globex")
    other.step("wb_report", {}, delay=3600)
    other_id = other.start()
    assert api.workflow(failed_id).state == "failed"

    OUTPUT.mkdir(exist_ok=True)
    SHOTS.mkdir(exist_ok=True)
    page = admin_page(browser, live_server.url, width=1366, height=900)

    listing = f"{live_server.url}/admin/django_lonnymq/workflowrecord/"
    page.goto(f"{listing}?state__exact=failed")
    rows = page.locator("#result_list tbody tr")
    assert rows.count() == 1 and "import" in rows.first.inner_text()
    page.goto(f"{listing}?channel=tenant-globex")
    assert page.locator("#result_list tbody tr").count() == 1
    page.screenshot(path=str(SHOTS / "workflows_list.png"), full_page=True)

    page.goto(f"{listing}{failed_id}/change/")
    graph = page.locator("#lq-workflow-graph")
    assert graph.is_visible()
    assert page.locator("#lq-workflow-graph .lq-step").count() == 5
    assert page.locator("#lq-workflow-graph .lq-step-dead").count() == 1
    assert page.locator("#lq-workflow-graph .lq-step-succeeded").count() == 2
    assert page.locator("#lq-workflow-graph .lq-step-queued").count() == 1
    assert page.locator("#lq-workflow-graph .lq-step-waiting").count() == 1
    assert page.locator("#lq-workflow-graph line").count() == 6
    page.screenshot(path=str(SHOTS / "workflow_graph.png"), full_page=True)

    page.goto(f"{listing}?state__exact=failed")
    page.check(f"input[name='_selected_action'][value='{failed_id}']")
    page.select_option("select[name='action']", "requeue_failed")
    page.click("button[name='index']")
    page.wait_for_selector("ul.messagelist li.success")
    assert "Requeued 1 failed step." in page.locator("ul.messagelist").inner_text()
    assert api.workflow(failed_id).state == "running"

    page.goto(listing)
    page.check(f"input[name='_selected_action'][value='{other_id}']")
    page.select_option("select[name='action']", "cancel")
    page.click("button[name='index']")
    page.wait_for_selector("ul.messagelist li.success")
    assert api.workflow(other_id).state == "cancelled"
    page.goto(f"{listing}{other_id}/change/")
    assert page.locator("#lq-workflow-graph .lq-step-cancelled").count() == 1

    page.goto(f"{live_server.url}/admin/django_lonnymq/channel/dashboard/")
    assert "1 cancelled" in page.locator("#lq-workflows").inner_text()

    # A view-only user sees the list and the graph, and no action.
    view = browser.new_context(viewport={"width": 1366, "height": 900}).new_page()
    view.goto(f"{live_server.url}/admin/login/?next=/admin/")
    view.fill("#id_username", "viewer")
    view.fill("#id_password", "correct horse battery")
    view.click("input[type=submit]")
    view.wait_for_selector("#site-name")
    view.goto(listing)
    assert view.locator("#result_list tbody tr").count() == 2
    assert view.locator("select[name='action']").count() == 0
    view.goto(f"{listing}{failed_id}/change/")
    assert view.locator("#lq-workflow-graph").is_visible()
    for shot in SHOTS.glob("*.png"):
        shutil.copy(shot, OUTPUT / shot.name)
    with connection.cursor() as cursor:
        cursor.execute("DELETE FROM lonnymq_message")


def test_the_workflows_own_page_has_cancel_and_requeue_buttons(  # type: ignore[no-untyped-def]
    live_server, browser
) -> None:
    """The buttons on one workflow's page post (with the CSRF token) and come back to it with
    a message; each shows only where it has something to do; a user without the change
    permission sees none, and a post of theirs is refused (403), a GET is not allowed (405)."""
    User.objects.create_superuser("ops", "ops@example.com", "correct horse battery")
    viewer = User.objects.create_user("viewer", "v@example.com", "correct horse battery", is_staff=True)
    viewer.user_permissions.add(Permission.objects.get(codename="view_workflowrecord"))
    flow = Workflow("import", channel="tenant-acme")
    fetch = flow.step("wb_fetch", {}, name="fetch", max_attempts=1)
    flow.step("wb_parse", {}, name="parse", after=[fetch])
    workflow_id = flow.start()
    run_step("wb_fetch", False)  # dead: the workflow fails
    assert api.workflow(workflow_id).state == "failed"

    OUTPUT.mkdir(exist_ok=True)
    SHOTS.mkdir(exist_ok=True)
    page = admin_page(browser, live_server.url, width=1366, height=900)
    detail = f"{live_server.url}/admin/django_lonnymq/workflowrecord/{workflow_id}/change/"
    page.goto(detail)
    assert page.locator("#lq-workflow-cancel").is_visible()
    assert page.locator("#lq-workflow-requeue").is_visible()
    page.screenshot(path=str(SHOTS / "workflow_buttons.png"), full_page=True)

    page.click("#lq-workflow-requeue")
    page.wait_for_selector("ul.messagelist li.success")
    assert page.url == detail
    assert f"Requeued 1 failed step of workflow {workflow_id}." in page.locator("ul.messagelist").inner_text()
    assert api.workflow(workflow_id).state == "running"
    assert page.locator("#lq-workflow-graph .lq-step-queued").count() == 1
    assert page.locator("#lq-workflow-requeue").count() == 0  # nothing dead now
    page.screenshot(path=str(SHOTS / "workflow_requeued.png"), full_page=True)

    page.click("#lq-workflow-cancel")
    page.wait_for_selector("ul.messagelist li.success")
    assert (
        f"Cancelled workflow {workflow_id} (0 running steps told to stop)."
        in page.locator("ul.messagelist").inner_text()
    )
    assert api.workflow(workflow_id).state == "cancelled"
    assert page.locator("#lq-workflow-graph .lq-step-cancelled").count() == 2
    assert page.locator("#lq-workflow-cancel").count() == 0  # a cancelled workflow has nothing to cancel
    page.screenshot(path=str(SHOTS / "workflow_cancelled.png"), full_page=True)

    # A view-only user: no button, and posting anyway is refused.
    other = Workflow("other")
    other.step("wb_report", {}, delay=3600)
    other_id = other.start()
    view = admin_page(browser, live_server.url, width=1366, height=900, user="viewer")
    view.goto(f"{live_server.url}/admin/django_lonnymq/workflowrecord/{other_id}/change/")
    assert view.locator("#lq-workflow-graph").is_visible()
    assert (
        view.locator("#lq-workflow-cancel").count() == 0 and view.locator("#lq-workflow-requeue").count() == 0
    )
    statuses = view.evaluate(
        """async (base) => {
            const token = document.cookie.split("; ").find((c) => c.startsWith("csrftoken=")).split("=")[1];
            const post = (url) => fetch(url, {method: "POST", headers: {"X-CSRFToken": token}, redirect: "manual"});
            return [(await post(base + "cancel/")).status, (await post(base + "requeue-failed/")).status,
                    (await fetch(base + "cancel/")).status];
        }""",
        f"/admin/django_lonnymq/workflowrecord/{other_id}/",
    )
    assert statuses == [403, 403, 405]
    assert api.workflow(other_id).state == "running"
    # The superuser's post without the CSRF token is refused too.
    no_token = page.evaluate(
        "async (url) => (await fetch(url, {method: 'POST', redirect: 'manual'})).status",
        f"/admin/django_lonnymq/workflowrecord/{other_id}/cancel/",
    )
    assert no_token == 403 and api.workflow(other_id).state == "running"
    for shot in SHOTS.glob("workflow_*.png"):
        shutil.copy(shot, OUTPUT / shot.name)
    with connection.cursor() as cursor:
        cursor.execute("DELETE FROM lonnymq_message")

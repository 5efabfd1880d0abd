"""Signing in to a broker that asks for credentials (``WHARF_ACL_FILE``): the console's own form,
credentials kept for the tab only, sent on every call and WebSocket, and a refusal that names the action."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.api.server import BrokerProcess
from tests.browser.conftest import Pages, in_ci, save_screenshot
from tests.browser.layout import DESKTOP, PHONE, assert_no_horizontal_overflow, assert_reachable

try:
    from playwright.sync_api import expect
except ImportError:
    if in_ci():
        raise
    pytest.skip("the playwright package is not installed (pip install -e '.[test]')", allow_module_level=True)

ADMIN = ("console-admin", "12345678")
READER = ("console-reader", "87654321")
ACL = f"""\
accounts:
  - accessKey: {ADMIN[0]}
    secretKey: {ADMIN[1]}
    admin: true
  - accessKey: {READER[0]}
    secretKey: {READER[1]}
    admin: false
    defaultTopicPerm: SUB
    defaultGroupPerm: SUB
"""


def basic(account: tuple[str, str]) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{account[0]}:{account[1]}".encode()).decode()}


@pytest.fixture(scope="module")
def acl_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    root = tmp_path_factory.mktemp("acl")
    acl_file = root / "acl.yaml"
    acl_file.write_text(ACL)
    broker = BrokerProcess(root / "store", acl_file=acl_file).start()
    try:
        if httpx.get(f"{broker.url}/v1/topics").status_code == 200:
            pytest.skip("ACL support is not in this build")
        yield broker
    finally:
        broker.stop()


def watch_401s(page: Any) -> list[Any]:
    """Every answer 401 the page receives, to check none of them is a navigation (which would make
    the browser ask for credentials itself)."""
    answers: list[Any] = []
    page.on("response", lambda response: answers.append(response) if response.status == 401 else None)
    return answers


def sign_in(page: Any, account: tuple[str, str]) -> None:
    form = page.locator("#signin")
    expect(form).to_be_visible()
    page.fill("#signin-access", account[0])
    page.fill("#signin-secret", account[1])
    page.click("#signin-submit")
    expect(form).to_be_hidden()


def test_the_console_signs_in_for_this_tab_only(pages: Pages, acl_broker: BrokerProcess) -> None:
    page = pages.open(acl_broker.url, width=PHONE[0], height=PHONE[1])
    refused = watch_401s(page)
    page.goto("/console/")  # the page itself needs no credentials
    expect(page.locator("#signin")).to_be_visible()
    expect(page.locator("#connection")).to_have_text("sign-in needed")
    assert_no_horizontal_overflow(page)
    save_screenshot(page, "signin")

    page.fill("#signin-access", ADMIN[0])
    page.fill("#signin-secret", "wrong")
    page.click("#signin-submit")
    expect(page.locator("#signin-error")).to_have_text(
        "The broker did not accept this access key and secret key."
    )
    sign_in(page, ADMIN)
    expect(page.locator("#connection")).to_have_text("live")
    expect(page.locator("#account-name")).to_have_text(f"signed in as {ADMIN[0]}")

    # Kept in this tab's sessionStorage, nowhere else.
    assert (
        page.evaluate("() => JSON.parse(sessionStorage.getItem('wharf.credentials')).accessKey") == ADMIN[0]
    )
    assert page.evaluate("() => localStorage.length") == 0
    assert page.context.cookies() == []
    other_tab = page.context.new_page()
    other_tab.goto("/console/")
    expect(other_tab.locator("#signin")).to_be_visible()
    other_tab.close()

    # Sent on every call: create a topic, produce to it, tail it over the WebSocket.
    page.fill("#create-topic-name", "signed-in")
    page.click("#create-topic")
    expect(page.locator("#create-topic-result")).to_have_text("created signed-in with 4 queues")
    assert httpx.get(f"{acl_broker.url}/v1/topics/signed-in", headers=basic(ADMIN)).status_code == 200
    page.fill("#tail-topic", "signed-in")
    page.click("#tail-start")
    expect(page.locator("#tail-state")).to_have_text("tailing signed-in (4 queues)")
    page.fill("#produce-topic", "signed-in")
    page.fill("#produce-body", "hello with credentials")
    page.click("#produce-send")
    expect(page.locator("#tail-rows tr").first).to_contain_text("hello with credentials")

    assert_reachable(page, page.locator("#sign-out"))
    page.click("#sign-out")
    expect(page.locator("#signin")).to_be_visible()
    assert page.evaluate("() => sessionStorage.getItem('wharf.credentials')") is None
    assert refused, "the broker never asked for credentials"
    for response in refused:
        request = response.request
        assert not request.is_navigation_request() and request.resource_type in ("fetch", "websocket"), (
            f"{request.url} answered 401 to a {request.resource_type} request"
        )


def test_an_account_without_admin_sees_no_admin_action_and_is_refused_anyway(
    pages: Pages, acl_broker: BrokerProcess
) -> None:
    refused = httpx.post(f"{acl_broker.url}/v1/topics", json={"name": "not-mine"}, headers=basic(READER))
    assert refused.status_code == 403, f"the reader account may create topics: {refused.text} (see ACL above)"
    made = httpx.post(
        f"{acl_broker.url}/v1/topics", json={"name": "readers-topic", "queues": 1}, headers=basic(ADMIN)
    )
    assert made.status_code in (200, 201), made.text
    page = pages.open(acl_broker.url, width=DESKTOP[0], height=DESKTOP[1])
    page.goto("/console/")
    sign_in(page, READER)
    expect(page.locator("body")).to_have_attribute("data-admin", "false")

    # The reader sees the topic, and no button to delete it, create a topic or promote the broker.
    row = page.locator('#topics-table tr[data-topic="readers-topic"]')
    expect(row).to_be_visible()
    expect(row.locator("button.browse")).to_be_visible()
    expect(row.locator("button.delete-topic")).to_be_hidden()
    expect(row.locator("button.change-topic")).to_be_hidden()
    expect(page.locator("#create-topic")).to_be_hidden()
    expect(page.locator("#change-topic")).to_be_hidden()
    expect(page.locator("#promote")).to_be_hidden()
    expect(page.locator("#dlq-resend-all")).to_be_hidden()
    expect(page.locator("#dlq-skip-all")).to_be_hidden()
    expect(page.locator("#tx-table")).to_contain_text("needs an admin account")
    save_screenshot(page, "reader")

    # The console is not the guard: the hidden button, shown and pressed, is refused by the broker.
    page.eval_on_selector("#create-topic-form", "form => form.classList.remove('admin-only')")
    page.fill("#create-topic-name", "not-mine")
    page.click("#create-topic")
    notice = page.locator("#notice")
    expect(notice).to_be_visible()
    expect(notice).to_contain_text(f"Not allowed as {READER[0]}: create topic not-mine")
    expect(page.locator("#create-topic-result")).to_contain_text("Not allowed")
    assert httpx.get(f"{acl_broker.url}/v1/topics/not-mine", headers=basic(ADMIN)).status_code == 404
    save_screenshot(page, "forbidden")
    page.click("#notice-close")
    expect(notice).to_be_hidden()


def test_an_admin_account_sees_the_admin_actions(pages: Pages, acl_broker: BrokerProcess) -> None:
    made = httpx.post(
        f"{acl_broker.url}/v1/topics", json={"name": "admins-topic", "queues": 1}, headers=basic(ADMIN)
    )
    assert made.status_code in (200, 201), made.text
    page = pages.open(acl_broker.url, width=DESKTOP[0], height=DESKTOP[1])
    page.goto("/console/")
    sign_in(page, ADMIN)
    expect(page.locator("body")).to_have_attribute("data-admin", "true")
    row = page.locator('#topics-table tr[data-topic="admins-topic"]')
    expect(row.locator("button.delete-topic")).to_be_visible()
    expect(row.locator("button.change-topic")).to_be_visible()
    expect(page.locator("#create-topic")).to_be_visible()
    expect(page.locator("#change-topic")).to_be_visible()
    expect(page.locator("#promote")).to_be_visible()

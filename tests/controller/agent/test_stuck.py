""""Stuck on a loading screen" (issue 19): the same page with a progress indicator in three
observations in a row is an issue in the trace, and the planner is told. A scripted caller
and planner: this is the runner's own logic, no device needed."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from controller.agent import AgentRunner, Plan, PlanStep, TraceStore
from controller.agent.runner import loading
from protocol.methods import Method

SPINNER = {"index": 0, "class_name": "android.widget.ProgressBar", "text": "",
           "resource_id": "com.example:id/spinner", "bounds": [0, 0, 10, 10]}
BUTTON = {"index": 1, "class_name": "android.widget.Button", "text": "Retry",
          "resource_id": "com.example:id/retry", "bounds": [0, 20, 10, 30], "actionable": True}


class Planner:
    corrects = True

    def __init__(self) -> None:
        self.feedback: list[str | None] = []

    async def plan(self, instruction: str, state: Mapping[str, Any],
                   elements: Sequence[Mapping[str, Any]], *, feedback: str | None = None,
                   memory: Sequence[str] = (), screenshot: bytes | None = None) -> Plan:
        self.feedback.append(feedback)
        return Plan(steps=[PlanStep(action="request_screenshot")])


def device(elements: list[dict[str, Any]]) -> Any:
    async def call(method: Method[Any, Any], params: dict[str, Any]) -> dict[str, Any]:
        if method.name == "device.state":
            return {"activity": "com.example/.FeedActivity", "activity_short": "FeedActivity",
                    "text": "[Device State] App: com.example Page: FeedActivity"}
        if method.name == "ui.dump":
            return {"elements": elements}
        if method.name == "ui.screenshot":
            return {"png": b"\x89PNG\r\n\x1a\nfake"}
        return {"ok": True, "results": []}

    return call


async def test_the_same_page_loading_three_times_is_reported() -> None:
    planner = Planner()
    trace = await TraceStore(None).open(user_id=None, device="d", tool="act")
    out = await AgentRunner(planner).act(device([SPINNER, BUTTON]), "read the feed", trace)
    issues = [s for s in out["steps"] if s["kind"] == "issue"]
    assert len(issues) == 1 and issues[0]["issue"] == "stuck_loading"
    assert "FeedActivity" in issues[0]["title"]
    told = [f for f in planner.feedback if f and "Stuck on a loading screen" in f]
    assert told  # the planner hears it from the third observation on


async def test_no_progress_indicator_no_issue() -> None:
    trace = await TraceStore(None).open(user_id=None, device="d", tool="act")
    out = await AgentRunner(Planner()).act(device([BUTTON]), "read the feed", trace)
    assert not [s for s in out["steps"] if s["kind"] == "issue"]


def test_progress_indicators_are_recognised() -> None:
    assert loading([SPINNER])
    assert loading([{"class_name": "com.google.android.material.progressindicator."
                                   "CircularProgressIndicator"}])
    assert loading([{"class_name": "android.view.View", "resource_id": "app:id/loading_view"}])
    assert not loading([BUTTON])

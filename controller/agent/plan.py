"""Plans: what an instruction turns into before anything is sent (nl2sh).

A :class:`Plan` is a list of :class:`PlanStep` — ``{action, target, pre_check, expect,
timeout_s, retries}`` — validated by pydantic whether it came from the rule templates or from
the LLM (unknown keys are refused: a model that invents fields gets a clear error, not a
silently ignored instruction). :func:`step_call` maps a step onto the bridge RPC that
performs it; the bridge checks every one of them (``agent.check``) before the first is sent.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator

from protocol.agent_methods import (
    APP_START,
    APP_STOP,
    UI_KEY,
    UI_SCREENSHOT,
    UI_SWIPE,
    UI_TAP,
    UI_TEXT,
)
from protocol.methods import SHELL, Method

__all__ = ["AGENT_TOOLS", "Check", "Plan", "PlanError", "PlanStep", "Refused", "step_call"]

_Target = Annotated[str, StringConstraints(min_length=1, max_length=500)]


class PlanError(Exception):
    """A plan could not be made: the instruction is not covered, or the LLM's answer is not a
    valid plan. ``reason``: ``refused`` (no rule covers it), ``invalid_plan``, ``llm_failed``."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


class Refused(PlanError):
    def __init__(self, message: str) -> None:
        super().__init__("refused", message)


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Check(_Model):
    """A condition on the device: every given field must hold. ``activity`` matches the full
    or the short class name; ``text`` an element whose text or description contains it;
    ``checked`` names an element (by text) that must be checked."""

    package: Annotated[str, StringConstraints(max_length=255)] | None = None
    activity: Annotated[str, StringConstraints(max_length=255)] | None = None
    text: Annotated[str, StringConstraints(max_length=200)] | None = None
    checked: Annotated[str, StringConstraints(max_length=200)] | None = None
    keyboard: bool | None = None

    @property
    def needs_ui(self) -> bool:
        return self.text is not None or self.checked is not None


Action = Literal[
    "tap", "type", "key", "start", "stop", "swipe", "shell",
    # The agent's own tools: nothing is sent to the device for the first two.
    "mark_done",  # target: the summary of what was achieved; the verifier judges it
    "remember",  # target: a fact to keep in the trace's scratchpad for later rounds
    "request_screenshot",  # a screenshot (marks: Set-of-Marks, default true) for the next plan
]
#: Steps the agent.check dry run does not see: no command reaches the device for them.
AGENT_TOOLS = frozenset({"mark_done", "remember", "request_screenshot"})


class PlanStep(_Model):
    """One step. ``target`` by action: ``tap`` the element's text (or ``index``/``x``,``y``),
    ``type`` the text, ``key`` the key name, ``start``/``stop`` the package, ``shell`` the
    command line (or ``argv``). ``state`` ``on``/``off`` makes a tap on a switch idempotent."""

    action: Action
    target: _Target | None = None
    index: Annotated[int, Field(ge=0, le=10_000)] | None = None
    x: Annotated[int, Field(ge=0, le=100_000)] | None = None
    y: Annotated[int, Field(ge=0, le=100_000)] | None = None
    x2: Annotated[int, Field(ge=0, le=100_000)] | None = None
    y2: Annotated[int, Field(ge=0, le=100_000)] | None = None
    activity: Annotated[str, StringConstraints(max_length=255)] | None = None
    argv: list[Annotated[str, StringConstraints(max_length=4096)]] | None = Field(
        default=None, max_length=64
    )
    state: Literal["on", "off"] | None = None
    marks: bool | None = None
    pre_check: Check | None = None
    expect: Check | None = None
    timeout_s: Annotated[float, Field(gt=0, le=60)] = 10.0
    retries: Annotated[int, Field(ge=0, le=3)] = 0

    @model_validator(mode="after")
    def _complete(self) -> Self:
        a = self.action
        if a == "tap" and self.target is None and self.index is None and self.x is None:
            raise ValueError("a tap needs a target text, an index or x/y")
        if a in ("type", "key", "start", "stop", "mark_done", "remember") and self.target is None:
            raise ValueError(f"{a} needs a target")
        if a == "swipe" and None in (self.x, self.y, self.x2, self.y2):
            raise ValueError("a swipe needs x, y, x2 and y2")
        if a == "shell" and self.target is None and not self.argv:
            raise ValueError("a shell step needs a command (target) or argv")
        return self


class Plan(_Model):
    steps: list[PlanStep] = Field(min_length=1, max_length=20)
    source: Literal["rules", "llm"] = "llm"
    note: Annotated[str, StringConstraints(max_length=500)] | None = None


def step_call(
    step: PlanStep, *, settled: bool = True
) -> tuple[Method[Any, Any], dict[str, Any]]:
    """The bridge RPC (method, params without ``serial``) that performs ``step``."""
    a = step.action
    if a == "request_screenshot":
        return UI_SCREENSHOT, {"marks": step.marks is not False}
    if a in AGENT_TOOLS:
        raise ValueError(f"{a} is not a device call")
    extra: dict[str, Any] = {"settled": settled} if a != "shell" else {}
    if settled:
        extra["settle_timeout_s"] = min(step.timeout_s, 30.0)
    if a == "tap":
        if step.index is not None:
            return UI_TAP, {"index": step.index, **extra}
        if step.x is not None and step.y is not None:
            return UI_TAP, {"x": step.x, "y": step.y, **extra}
        return UI_TAP, {"text": step.target, **extra}
    if a == "type":
        return UI_TEXT, {"text": step.target, **extra}
    if a == "key":
        key = (step.target or "").strip().upper().replace(" ", "_")
        return UI_KEY, {"key": key, **extra}
    if a == "start":
        params: dict[str, Any] = {"package": step.target, **extra}
        if step.activity:
            params["activity"] = step.activity
        return APP_START, params
    if a == "stop":
        return APP_STOP, {"package": step.target, **extra}
    if a == "swipe":
        return UI_SWIPE, {"x1": step.x, "y1": step.y, "x2": step.x2, "y2": step.y2, **extra}
    if step.argv:
        return SHELL, {"argv": list(step.argv)}
    return SHELL, {"command": step.target}

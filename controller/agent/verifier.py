"""The verifier: does the screen show what the agent claims it did?

When a plan says ``mark_done(summary)``, :class:`Verifier` sends the goal, the agent's
summary, the device state, the on-screen elements and the evidence — the at-action and the
settled frame side by side (the composite the last action returned, or a fresh screenshot
when there was none) — to a model of its own: its own system prompt, temperature ≤ 0.1, and a
JSON verdict ``{"done": bool, "gap": str, "evidence": str}`` where ``gap`` names what the
screen shows is still missing. A rejection goes back to the planner as the next observation,
the gap named; the runner writes every verdict and its frames into the trace.

Without a model the verifier says so (:data:`UNVERIFIED`) rather than approving: nothing
claims success that nothing checked. A reply that is not a verdict, or a failing model, is
``unverified`` too, with the reason.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, cast

from controller.agent.prompts import OVERLAY_WARNING, elements_text

__all__ = ["UNVERIFIED", "Verdict", "Verifier"]

log = logging.getLogger("droidwire.controller.agent")

UNVERIFIED: Literal["unverified"] = "unverified"
MAX_SUMMARY = 1000

_SYSTEM = f"""You are the verifier of an agent that operates an Android device for a user.
You decide whether the user's goal is achieved, from the evidence only: the device state, the
on-screen elements, and an image with two frames side by side (left: just after the agent's
last action; right: once the screen settled). The agent's own summary is a claim, not evidence:
if the screen does not show the goal reached, it is not done.
{OVERLAY_WARNING}
Answer with ONE JSON object and nothing else:
{{"done": true|false, "gap": "what the screen shows is still missing or wrong (empty when done)",
  "evidence": "what on the screen shows it, briefly"}}"""


@dataclass(frozen=True, slots=True)
class Verdict:
    """``accepted``, ``rejected`` (``gap`` says what is missing) or ``unverified`` (no model,
    or no usable answer: ``reason`` says which)."""

    status: Literal["accepted", "rejected", "unverified"]
    gap: str = ""
    evidence: str = ""
    reason: str = ""

    @property
    def accepted(self) -> bool:
        return self.status == "accepted"

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"status": self.status}
        for key in ("gap", "evidence", "reason"):
            value = getattr(self, key)
            if value:
                out[key] = value
        return out


def parse_verdict(reply: str) -> Verdict:
    start, end = reply.find("{"), reply.rfind("}")
    try:
        raw = json.loads(reply[start : end + 1]) if 0 <= start < end else None
    except json.JSONDecodeError:
        raw = None
    if not isinstance(raw, dict) or not isinstance(raw.get("done"), bool):
        return Verdict(UNVERIFIED, reason="the verifier's answer is not a JSON verdict")
    gap = str(raw.get("gap") or "")[:500]
    evidence = str(raw.get("evidence") or "")[:500]
    if raw["done"]:
        return Verdict("accepted", evidence=evidence)
    return Verdict("rejected", gap=gap or "the verifier did not say what is missing",
                   evidence=evidence)


class Verifier:
    """Judges ``mark_done`` with a chat model (``complete(messages) -> str``), or says it
    cannot (``client`` None)."""

    def __init__(self, client: Any | None) -> None:
        self.client = client

    @property
    def configured(self) -> bool:
        return self.client is not None

    async def verify(
        self,
        goal: str,
        summary: str,
        state: Mapping[str, Any],
        elements: Sequence[Mapping[str, Any]],
        frames_png: bytes | None,
        *,
        memory: Sequence[str] = (),
    ) -> Verdict:
        if self.client is None:
            return Verdict(UNVERIFIED, reason="no verifier model is configured: the claim was "
                           "not checked (set OPENAI_BASE_URL or OPENAI_API_KEY)")
        text = (
            f"Goal: {goal}\nThe agent says it is done: {summary[:MAX_SUMMARY]}\n"
            f"{state.get('text', '')}\nOn screen:\n{elements_text(elements)}"
        )
        if memory:
            text += "\nThe agent noted: " + "; ".join(memory)
        content: Any = text
        if frames_png is not None:
            url = "data:image/png;base64," + base64.b64encode(frames_png).decode("ascii")
            content = [{"type": "text", "text": text},
                       {"type": "image_url", "image_url": {"url": url}}]
        messages = [{"role": "system", "content": _SYSTEM}, {"role": "user", "content": content}]
        from fixer.exceptions import LlmError

        try:
            reply = await asyncio.to_thread(
                self.client.complete, cast("list[dict[str, str]]", messages)
            )
        except LlmError as exc:
            log.warning("the verifier model failed: %s", exc)
            return Verdict(UNVERIFIED, reason=f"the verifier model failed: {exc}")
        return parse_verdict(str(reply))

"""The agent toolkit on the controller: nl2sh and traces.

Modules: :mod:`.plan` (plan models, step → RPC), :mod:`.planners` (:class:`RulePlanner`,
:class:`LlmPlanner`), :mod:`.runner` (:class:`AgentRunner`: observe → plan → check → run →
corrections, the verifier of ``mark_done``), :mod:`.verifier` (:class:`Verifier`),
:mod:`.prompts` (page-awareness rules, the overlay warning), :mod:`.traces` (traces as runs
with a step log, evidence frames).
"""

from __future__ import annotations

from controller.agent.plan import Check, Plan, PlanError, PlanStep, Refused, step_call
from controller.agent.planners import APP_ALIASES, LlmPlanner, Planner, RulePlanner, parse_plan
from controller.agent.runner import AgentRunner, Caller, RunnerSettings, evaluate
from controller.agent.traces import (
    DbFrameStore,
    FrameNotKept,
    FrameStore,
    MemoryFrameStore,
    StoredFrame,
    Trace,
    TraceStore,
    frame_path,
)
from controller.agent.verifier import Verdict, Verifier

__all__ = [
    "APP_ALIASES",
    "AgentRunner",
    "Caller",
    "Check",
    "DbFrameStore",
    "FrameNotKept",
    "FrameStore",
    "LlmPlanner",
    "MemoryFrameStore",
    "Plan",
    "PlanError",
    "PlanStep",
    "Planner",
    "Refused",
    "RulePlanner",
    "RunnerSettings",
    "StoredFrame",
    "Trace",
    "TraceStore",
    "Verdict",
    "Verifier",
    "evaluate",
    "frame_path",
    "parse_plan",
    "step_call",
]

"""From a test's syntax tree to the steps the instrumentation player performs.

Each ``@Test`` method becomes a list of plain-dict steps (the :class:`~device_bridge.sim.apk.
SimTest` ``steps``), in execution order, with the thread each runs on. The walker follows
what LLM-written tests do: ``ActivityScenario.launch(…).use { it.onActivity { a -> … } }``,
scenario rules, ``runOnMainSync``/``runOnUiThread``/``@UiThreadTest`` (main thread),
``Thread {}``/executors/``Dispatchers.IO`` (background), helper functions of the test class
(inlined), ``@Before``/``@After``, StrictMode policies set in the test or by
``StrictModeRule``, timing by ``DroidUnblocker.measure``, ``measureTimeMillis`` or clock
deltas logged with ``Log.x(…)``, constant loops, explicit throws and failing assertions.

Step kinds (key → meaning), all with ``thread`` (``test`` | ``main`` | ``background``) and
``line`` (1-based line in the test file) where it applies:

``{"launch": cls}``                       the activity starts (``Displayed`` line)
``{"call": m, "via": …, "dispatch": n, "timed": b, "app_line": n}``  a demo-app method
                                          runs; ``dispatch`` groups the steps of one
                                          main-thread message (ANR accounting), ``timed``
                                          says a DroidUnblocker line reports it
``{"mark": id}``                          a clock reading (timers are mark pairs)
``{"log": {priority, tag, parts}}``       a ``Log`` call; parts are text or elapsed values
``{"policy": {detect, penalty_log, death_on_network}}``  ``StrictMode.setThreadPolicy``
``{"permit": kind}``                      ``StrictMode.allowThreadDiskReads()`` and friends
``{"sleep": ms}``                         ``Thread.sleep`` / ``SystemClock.sleep`` / ``delay``
``{"throw": cls, "message": …}``          an uncaught throw
``{"fail": msg}`` / ``{"assert": cond, "message": …, "negate": b}``  JUnit assertions
``{"if": cond, "then": [...], "else": [...]}``  a branch on a timing value

Elapsed values and conditions reference marks: ``{"elapsed": [from, to], "unit": "ms"}``.

This module finds the tests of a file (``@Test``, ``@Ignore``, ``@Before``/``@After``, JUnit 4's
method order) and marks the calls a DroidUnblocker line times; the walk itself is
:mod:`~device_bridge.sim.toolchain_walker` (statements) over
:mod:`~device_bridge.sim.toolchain_values` (expressions and the steps they emit).
"""

from __future__ import annotations

import re
from dataclasses import replace

from tree_sitter import Node

from device_bridge.sim.behaviour import DemoApp
from device_bridge.sim.toolchain_kotlin import KotlinFile, text, walk
from device_bridge.sim.toolchain_resolve import Scope
from device_bridge.sim.toolchain_values import DEFAULT_RULE_POLICY, Ctx, Step
from device_bridge.sim.toolchain_walker import (
    MAX_LOOP,
    StepWalker,
    annotation_names,
    is_test_function,
)

__all__ = ["MAX_LOOP", "extract_tests"]


def _class_of(fn: Node, fallback: str) -> tuple[str, Node | None]:
    anc = fn.parent
    while anc is not None:
        if anc.type in ("class_declaration", "object_declaration"):
            name = anc.child_by_field_name("name") or next(
                (c for c in anc.children if c.type == "identifier"), None)
            return (text(name) if name is not None else fallback), anc
        anc = anc.parent
    return fallback, None


def extract_tests(file: KotlinFile, scope: Scope, app: DemoApp) -> list[tuple[str, str, bool,
                                                                          list[Step]]]:
    """``[(class simple name, method, ignored, steps)]`` for each ``@Test`` method."""
    fallback_match = re.search(r"\bclass\s+([A-Za-z_][A-Za-z0-9_]*)", file.source)
    fallback = fallback_match.group(1) if fallback_match else "UnknownTest"
    functions: dict[tuple[str, str], tuple[Node, Node | None]] = {}
    for tree in file.trees:
        for node in walk(tree.root_node):
            if node.type != "function_declaration":
                continue
            name = node.child_by_field_name("name")
            if name is None:
                continue
            cls, cls_node = _class_of(node, fallback)
            key = (cls, text(name))
            # prefer the clean per-member parse over the full one when both have it
            if key not in functions or not node.has_error:
                functions[key] = (node, cls_node)
    class_ignored = {c for c, _ in functions if re.search(
        rf"@Ignore[^\n]*\n(?:\s*@[^\n]*\n)*\s*class\s+{re.escape(c)}\b", file.source)}
    out = []
    for (cls, method), (fn, _) in functions.items():
        if not is_test_function(fn):
            continue
        annotations = annotation_names(fn)
        ignored = "Ignore" in annotations or cls in class_ignored
        ex = StepWalker(file, scope, app, cls)
        ctx = Ctx(frame=method)
        if scope.scenario_rules or scope.activity_rules:
            ex.emit({"launch": app.activity}, ctx)
        if _has_strictmode_rule(file):
            ex.emit({"policy": dict(DEFAULT_RULE_POLICY), "rule": True}, replace(ctx, thread="main"))
            ex.emit({"policy": dict(DEFAULT_RULE_POLICY), "rule": True}, ctx)
        for (other_cls, _other), (other_fn, _) in functions.items():
            if other_cls == cls and "Before" in annotation_names(other_fn):
                _visit_body(ex, other_fn, ctx)
        body_ctx = ctx
        if "UiThreadTest" in annotations:
            body_ctx = ex.main_ctx(ctx, "UiThreadTest")
            body_ctx = replace(body_ctx, frame=method)
        _visit_body(ex, fn, body_ctx)
        for (other_cls, _other), (other_fn, _) in functions.items():
            if other_cls == cls and "After" in annotation_names(other_fn):
                _visit_body(ex, other_fn, ctx)
        _mark_timed(ex.w.steps)
        out.append((cls, method, ignored, ex.w.steps))
    # JUnit 4's MethodSorters.DEFAULT: by String.hashCode() of the name, ties by name
    out.sort(key=lambda t: (t[0], _java_hash(t[1]), t[1]))
    return out


def _mark_timed(steps: list[Step]) -> None:
    """Set ``timed`` on each call that lies inside an interval a DroidUnblocker line reports."""
    position = {str(st["mark"]): i for i, st in enumerate(steps) if "mark" in st}
    spans = []
    for step in steps:
        log = step.get("log")
        if isinstance(log, dict) and log.get("tag") == "DroidUnblocker":
            for part in log.get("parts", []):
                if isinstance(part, dict) and "elapsed" in part:
                    start, end = part["elapsed"]
                    if start in position and end in position:
                        spans.append((position[start], position[end]))
    for i, step in enumerate(steps):
        if "call" in step:
            step["timed"] = any(a < i < b for a, b in spans)


def _java_hash(name: str) -> int:
    h = 0
    for ch in name:
        h = (31 * h + ord(ch)) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def _visit_body(ex: StepWalker, fn: Node, ctx: Ctx) -> None:
    body = next((c for c in fn.children if c.type == "function_body"), None)
    if body is not None:
        ex.visit(body, ctx)


def _has_strictmode_rule(file: KotlinFile) -> bool:
    return (bool(re.search(r"\bStrictModeRule\s*\(", file.source)) and "@get:Rule" in file.source) \
        or bool(re.search(r"@Rule[\s\S]{0,200}StrictModeRule\s*\(", file.source))

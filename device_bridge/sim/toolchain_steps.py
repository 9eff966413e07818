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
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Any

from tree_sitter import Node

from device_bridge.sim.behaviour import DemoApp
from device_bridge.sim.toolchain_kotlin import KotlinFile, after_eq, line_of, text, walk
from device_bridge.sim.toolchain_resolve import Scope, extension_receiver, is_activity_expr

__all__ = ["MAX_LOOP", "extract_tests"]

Step = dict[str, Any]

MAX_LOOP = 20  # constant loops are unrolled up to this many iterations
MAX_INLINE_DEPTH = 4
MAX_STEPS = 2_000
MAX_VISITS = 20_000

_MS_CLOCKS = {"elapsedRealtime", "uptimeMillis", "currentTimeMillis", "currentThreadTimeMillis"}
_NS_CLOCKS = {"nanoTime", "elapsedRealtimeNanos"}
_MAIN_RUNNERS = {"runOnMainSync", "runOnUiThread", "post", "postAtFrontOfQueue"}
_BACKGROUND_RUNNERS = {"thread", "execute", "submit", "Thread", "start"}
_ASSERTIONS = frozenset(
    {"fail", "assertTrue", "assertFalse", "assertThat", "error", "TODO", "check", "require"}
)
_LOG_LEVELS = {"v": "V", "d": "D", "i": "I", "w": "W", "e": "E", "wtf": "F"}
_JAVA_LANG = {
    "IllegalStateException", "IllegalArgumentException", "RuntimeException", "Exception",
    "AssertionError", "UnsupportedOperationException", "NullPointerException", "Error",
    "Throwable", "ArithmeticException", "IndexOutOfBoundsException", "ClassCastException",
    "SecurityException", "InterruptedException",
}
_POLICY_KINDS = {
    "detectDiskReads": ["DiskRead"],
    "detectDiskWrites": ["DiskWrite"],
    "detectNetwork": ["Network"],
    "detectAll": ["DiskRead", "DiskWrite", "Network", "CustomSlowCall", "ResourceMismatch",
                  "UnbufferedIo"],
    "detectCustomSlowCalls": ["CustomSlowCall"],
    "detectUnbufferedIo": ["UnbufferedIo"],
}
DEFAULT_RULE_POLICY: dict[str, Any] = {
    "detect": sorted(_POLICY_KINDS["detectAll"]), "penalty_log": True, "death_on_network": False,
}


@dataclass(frozen=True)
class Ctx:
    thread: str = "test"
    via: str | None = None
    dispatch: int | None = None
    thread_name: str | None = None
    waiter: str | None = None  # a joined background block: the thread that waits for it
    frame: str = ""
    depth: int = 0
    swallow: bool = False  # inside try { } catch: throws and failures are caught
    activity_receiver: bool = False  # inside with(activity) { } / activity.apply { }


@dataclass
class _Value:
    """A timing value: elapsed between two marks, in a unit."""

    start: str
    end: str
    unit: str = "ms"
    fmt: str = "int"

    def as_part(self) -> dict[str, Any]:
        return {"elapsed": [self.start, self.end], "unit": self.unit, "format": self.fmt}


@dataclass
class _TestWalk:
    steps: list[Step] = field(default_factory=list)
    marks: dict[str, str] = field(default_factory=dict)  # variable → mark id (clock readings)
    mark_units: dict[str, str] = field(default_factory=dict)  # mark id → clock unit
    values: dict[str, _Value] = field(default_factory=dict)  # variable → elapsed value
    returned: _Value | None = None  # the timing value an inlined helper returned
    # function-typed parameters of the helpers being inlined → the lambdas passed for them
    lambda_args: list[dict[str, Node]] = field(default_factory=list)
    counter: int = 0
    visits: int = 0
    dispatches: int = 0
    lambdas: int = 0
    threads: int = 0


class _Extractor:
    def __init__(self, file: KotlinFile, scope: Scope, app: DemoApp, class_name: str):
        self.file = file
        self.scope = scope
        self.app = app
        self.class_name = class_name
        self.w = _TestWalk()

    # --- helpers
    def emit(self, step: Step, ctx: Ctx, node: Node | None = None) -> None:
        if len(self.w.steps) >= MAX_STEPS:
            return
        step.setdefault("thread", ctx.thread)
        if ctx.thread_name:
            step.setdefault("thread_name", ctx.thread_name)
        if ctx.dispatch is not None:
            step.setdefault("dispatch", ctx.dispatch)
        if ctx.via:
            step.setdefault("via", ctx.via)
        if ctx.waiter:
            step.setdefault("waiter", ctx.waiter)
        if node is not None:
            step.setdefault("line", line_of(node))
        if ctx.frame:
            step.setdefault("frame", ctx.frame)
        self.w.steps.append(step)

    def new_mark(self, ctx: Ctx, node: Node, unit: str) -> str:
        self.w.counter += 1
        mark = f"m{self.w.counter}"
        self.w.mark_units[mark] = unit
        self.emit({"mark": mark}, ctx, node)
        return mark

    def main_ctx(self, ctx: Ctx, via: str) -> Ctx:
        if ctx.thread == "main":
            return replace(ctx, via=ctx.via or via)
        self.w.dispatches += 1
        self.w.lambdas += 1
        base = ctx.frame.split("$", 1)[0]
        return replace(ctx, thread="main", via=via, dispatch=self.w.dispatches,
                       frame=f"{base}$lambda${self.w.lambdas - 1}", thread_name=None,
                       waiter=None)

    def background_ctx(self, ctx: Ctx, name: str, *, joined: bool = False) -> Ctx:
        self.w.threads += 1
        self.w.lambdas += 1
        base = ctx.frame.split("$", 1)[0]
        waits_on_main = joined and ctx.thread == "main"
        return replace(ctx, thread="background", via=None,
                       dispatch=ctx.dispatch if waits_on_main else None,
                       thread_name=name.format(n=self.w.threads),
                       waiter=ctx.thread if joined else None,
                       frame=f"{base}$lambda${self.w.lambdas - 1}")

    # --- statements
    def visit(self, node: Node, ctx: Ctx) -> None:
        self.w.visits += 1
        if self.w.visits > MAX_VISITS:
            return  # nested constant loops can multiply: stop walking, keep what we have
        handler = getattr(self, f"_on_{node.type}", None)
        if handler is not None:
            handler(node, ctx)
            return
        if node.type in ("lambda_literal", "object_literal", "function_declaration",
                         "class_declaration", "anonymous_function", "string_literal"):
            return  # declarations and values, not executed here
        for child in node.named_children:
            self.visit(child, ctx)

    def visit_lambda(self, lam: Node | None, ctx: Ctx) -> None:
        if lam is None:
            return
        if lam.type == "annotated_lambda":
            lam = next((c for c in lam.children if c.type == "lambda_literal"), None)
            if lam is None:
                return
        for child in lam.named_children:
            if child.type != "lambda_parameters":
                self.visit(child, ctx)

    def _on_property_declaration(self, node: Node, ctx: Ctx) -> None:
        decl = next((c for c in node.children if c.type == "variable_declaration"), None)
        init = after_eq(node)
        if init is None:
            return
        name = text(decl.children[0]) if decl is not None and decl.children else None
        self.bind(name, init, ctx)

    def _on_assignment(self, node: Node, ctx: Ctx) -> None:
        left = node.child_by_field_name("left")
        right = node.child_by_field_name("right")
        if right is None:
            return
        name = text(left) if left is not None and left.type == "identifier" else None
        self.bind(name, right, ctx)

    def bind(self, name: str | None, init: Node, ctx: Ctx) -> None:
        clock = _clock_unit(init)
        if clock is not None:
            mark = self.new_mark(ctx, init, clock)
            if name:
                self.w.marks[name] = mark
            return
        value = self.measure_call(init, ctx)
        if value is None:
            value = self.value_of(init, ctx)
        if value is not None:
            if name:
                self.w.values[name] = value
            return
        self.w.returned = None
        self.visit(init, ctx)
        if name and self.w.returned is not None:
            self.w.values[name] = self.w.returned
        self.w.returned = None

    def _on_return_expression(self, node: Node, ctx: Ctx) -> None:
        expr = next((c for c in node.named_children if c.type != "label"), None)
        if expr is None:
            return
        value = self.measure_call(expr, ctx) or self.value_of(expr, ctx)
        if value is None:
            self.visit(expr, ctx)
        self.w.returned = value

    def _on_for_statement(self, node: Node, ctx: Ctx) -> None:
        count = 1
        for child in node.named_children:
            if child.type in ("range_expression", "infix_expression"):
                count = _range_count(child) or 1
        body = next((c for c in node.children if c.type in ("block", "control_structure_body")),
                    None)
        if body is None:
            body = node.named_children[-1] if node.named_children else None
        for _ in range(min(count, MAX_LOOP)):
            if body is not None:
                self.visit(body, ctx)

    def _on_try_expression(self, node: Node, ctx: Ctx) -> None:
        has_catch = any(c.type == "catch_block" for c in node.children)
        for child in node.children:
            if child.type == "block":
                self.visit(child, replace(ctx, swallow=ctx.swallow or has_catch))
            elif child.type == "finally_block":
                self.visit(child, ctx)

    def _on_throw_expression(self, node: Node, ctx: Ctx) -> None:
        if ctx.swallow:
            return
        exc = node.named_children[0] if node.named_children else None
        cls, message = "java.lang.RuntimeException", None
        if exc is not None and exc.type == "call_expression":
            cls = self.qualify_exception(text(exc.children[0]))
            message = self.message_of(_args(exc)[0] if _args(exc) else None, ctx)
        self.emit({"throw": cls, "message": message}, ctx, node)

    def _on_if_expression(self, node: Node, ctx: Ctx) -> None:
        cond_node = node.child_by_field_name("condition")
        bodies = [c for c in node.named_children if c is not cond_node
                  and c.id != (cond_node.id if cond_node else -1)]
        then_body = bodies[0] if bodies else None
        else_body = bodies[1] if len(bodies) > 1 else None
        cond = self.condition_of(cond_node, ctx) if cond_node is not None else None
        if cond is None:
            if cond_node is not None and text(cond_node).strip() in ("true", "false"):
                chosen = then_body if text(cond_node).strip() == "true" else else_body
                if chosen is not None:
                    self.visit(chosen, ctx)
                return
            # unknown condition: run the then-branch, but never let it throw or fail
            if then_body is not None:
                self.visit(then_body, replace(ctx, swallow=True))
            return
        then_steps = self.steps_of(then_body, ctx)
        else_steps = self.steps_of(else_body, ctx)
        self.emit({"if": cond, "then": then_steps, "else": else_steps}, ctx, node)

    def steps_of(self, body: Node | None, ctx: Ctx) -> list[Step]:
        """The steps ``body`` emits, collected apart from the enclosing block's."""
        saved, self.w.steps = self.w.steps, []
        if body is not None:
            self.visit(body, ctx)
        steps, self.w.steps = self.w.steps, saved
        return steps

    def _on_when_expression(self, node: Node, ctx: Ctx) -> None:
        return  # branches we cannot decide are not run

    def _on_call_expression(self, node: Node, ctx: Ctx) -> None:
        if self.measure_call(node, ctx) is not None:
            return
        callee = node.children[0]
        receiver: Node | None = None
        name = ""
        if callee.type == "identifier":
            name = text(callee)
        elif callee.type == "navigation_expression" and len(callee.children) >= 3:
            receiver, name = callee.children[0], text(callee.children[-1])
        elif callee.type == "call_expression":  # f(args) { lambda }
            inner = callee.children[0]
            name = text(inner.children[-1]) if inner.type == "navigation_expression" \
                else text(inner)
            if inner.type == "navigation_expression":
                receiver = inner.children[0]
        args = _args(node)
        lam = _trailing_lambda(node)
        recv_text = text(receiver) if receiver is not None else ""

        # a function-typed parameter of an inlined helper, called: run the lambda passed for it
        bound = self.bound_lambda(name) if receiver is None else None
        if bound is not None:
            for arg in args:
                self.visit(arg, ctx)
            if args and is_activity_expr(args[0], self.scope):
                self.scope.activity_lambdas.add(bound.id)
            self.visit_lambda(bound, ctx)
            return

        # a call of a demo-app method
        if name in self.app.methods and (
            (receiver is not None and is_activity_expr(receiver, self.scope))
            or (receiver is None and ctx.activity_receiver)
        ):
            if receiver is not None:
                self.visit(receiver, ctx)
            self.emit({"call": name, "app_line": self.app.methods[name].line}, ctx, node)
            return
        if (name == "launch" and "ActivityScenario" in recv_text) or name == "launchActivity":
            self.emit({"launch": self.app.activity}, ctx, node)
            return
        if name == "onActivity":
            if receiver is not None:
                self.visit(receiver, ctx)
            target = lam
            if target is None and args and args[0].named_children:
                target = self.bound_lambda(text(args[0].named_children[0])) or args[0]
                if target is not args[0]:
                    self.scope.activity_lambdas.add(target.id)
            self.visit_lambda(target, self.main_ctx(ctx, "onActivity"))
            return
        if name in _MAIN_RUNNERS and lam is not None:
            if receiver is not None and name != "post":
                self.visit(receiver, ctx)
            self.visit_lambda(lam, self.main_ctx(ctx, name))
            return
        if name in ("withContext", "launch", "async", "runBlocking", "runTest") and lam is not None:
            dispatcher = " ".join(text(a) for a in args)
            joined = name in ("withContext", "runBlocking", "runTest") or _awaited(node)
            if "Dispatchers.Main" in dispatcher:
                self.visit_lambda(lam, self.main_ctx(ctx, "coroutine"))
            elif "Dispatchers.IO" in dispatcher or "Dispatchers.Default" in dispatcher \
                    or "Dispatchers.IO" in recv_text or "Dispatchers.Default" in recv_text:
                self.visit_lambda(lam, self.background_ctx(
                    ctx, "DefaultDispatcher-worker-{n}", joined=joined))
            elif "GlobalScope" in recv_text:
                self.visit_lambda(lam, self.background_ctx(ctx, "DefaultDispatcher-worker-{n}"))
            else:
                self.visit_lambda(lam, ctx)
            return
        if name in _BACKGROUND_RUNNERS and lam is not None:
            joined = _awaited(node)
            label = "pool-1-thread-{n}" if name in ("execute", "submit") else "Thread-{n}"
            self.visit_lambda(lam, self.background_ctx(ctx, label, joined=joined))
            return
        if name in ("Thread",) and args:
            return
        if name in ("with",) and args and lam is not None:
            self.visit_lambda(lam, replace(
                ctx, activity_receiver=is_activity_expr(args[0], self.scope)))
            return
        if name in ("apply", "run", "also", "let", "use") and lam is not None:
            is_act = receiver is not None and is_activity_expr(receiver, self.scope)
            if receiver is not None:
                self.visit(receiver, ctx)
            self.visit_lambda(lam, replace(
                ctx, activity_receiver=(is_act and name in ("apply", "run")) or ctx.activity_receiver))
            return
        if name == "repeat" and lam is not None:
            count = _int_literal(args[0]) if args else None
            for _ in range(min(count if count is not None else 1, MAX_LOOP)):
                self.visit_lambda(lam, ctx)
            return
        if name == "forEach" and lam is not None and receiver is not None:
            count = _range_count(receiver) or 1
            for _ in range(min(count, MAX_LOOP)):
                self.visit_lambda(lam, ctx)
            return
        if name in _LOG_LEVELS and recv_text == "Log" and len(args) >= 2:
            self.log_call(name, args, ctx, node)
            return
        if name == "report" and recv_text == "DroidUnblocker" and args:
            value = self.value_of(args[0], ctx)
            if value is not None:
                self.emit({"log": {"priority": "I", "tag": "DroidUnblocker",
                                   "parts": ["elapsed=", value.as_part(), "ms"]}}, ctx, node)
            return
        if name == "setThreadPolicy" and recv_text == "StrictMode" and args:
            policy = self.policy_of(args[0])
            if policy is not None:  # an unknown value (a saved policy being restored): skip
                self.emit({"policy": policy}, ctx, node)
            return
        if name == "enableDefaults" and recv_text == "StrictMode":
            self.emit({"policy": dict(DEFAULT_RULE_POLICY)}, ctx, node)
            return
        if name in ("allowThreadDiskReads", "allowThreadDiskWrites") and recv_text == "StrictMode":
            kind = "DiskRead" if name.endswith("Reads") else "DiskWrite"
            self.emit({"permit": kind}, ctx, node)
            return
        if (name == "sleep" and recv_text in ("Thread", "SystemClock")) or name == "delay":
            ms = _int_literal(args[0]) if args else None
            if ms is not None:
                self.emit({"sleep": ms}, ctx, node)
            return
        if name in _ASSERTIONS and (receiver is None or recv_text == "Assert") \
                and self.assertion(name, args, ctx, node):
            return
        if name in self.scope.functions and ctx.depth < MAX_INLINE_DEPTH:
            fn = self.scope.functions[name]
            on_activity = extension_receiver(fn) == self.app.activity.rsplit(".", 1)[-1] and (
                (receiver is not None and is_activity_expr(receiver, self.scope))
                or (receiver is None and ctx.activity_receiver))
            if not _is_test_function(fn) and (receiver is None or on_activity):
                for arg in args:
                    self.visit(arg, ctx)
                self.w.lambda_args.append(_lambda_bindings(fn, node))
                body = next((c for c in fn.children if c.type == "function_body"), None)
                helper_ctx = replace(ctx, depth=ctx.depth + 1, activity_receiver=on_activity)
                expr = body.named_children[0] if body is not None and body.named_children \
                    and body.children[0].type == "=" else None
                if expr is not None:  # fun f() = expression: its value is the result
                    value = self.measure_call(expr, helper_ctx) or self.value_of(expr, helper_ctx)
                    if value is None:
                        self.visit(expr, helper_ctx)
                    self.w.returned = value
                elif body is not None:
                    self.visit(body, helper_ctx)
                self.w.lambda_args.pop()
                return
        # anything else: evaluate receiver, arguments, trailing lambdas in order
        for child in node.named_children:
            if child.type == "annotated_lambda":
                self.visit_lambda(child, ctx)
            else:
                self.visit(child, ctx)

    def bound_lambda(self, name: str) -> Node | None:
        for frame in reversed(self.w.lambda_args):
            if name in frame:
                return frame[name]
        return None

    def _on_value_argument(self, node: Node, ctx: Ctx) -> None:
        for child in node.named_children:
            if child.type == "lambda_literal":
                continue  # a lambda passed as a value is not run by the call we do not know
            self.visit(child, ctx)

    # --- timing
    def measure_call(self, node: Node, ctx: Ctx) -> _Value | None:
        """``measureTimeMillis {}`` / ``measureNanoTime {}`` / ``DroidUnblocker.measure {}``."""
        if node.type != "call_expression":
            return None
        callee = node.children[0]
        name = text(callee.children[-1]) if callee.type == "navigation_expression" \
            else text(callee)
        recv = text(callee.children[0]) if callee.type == "navigation_expression" else ""
        lam = _trailing_lambda(node)
        if lam is None:
            return None
        units = {"measureTimeMillis": ("ms", "int"), "measureNanoTime": ("ns", "int"),
                 "measureTime": ("ms", "duration"), "measureTimedValue": ("ms", "duration")}
        if name in units and not recv:
            unit, fmt = units[name]
            start = self.new_mark(ctx, node, unit)
            self.visit_lambda(lam, ctx)
            end = self.new_mark(ctx, node, unit)
            return _Value(start, end, unit, fmt)
        if recv == "DroidUnblocker" and name in ("measure", "measureOnMainThread"):
            inner = ctx if name == "measure" else self.main_ctx(ctx, "runOnMainSync")
            start = self.new_mark(inner, node, "ms")
            self.visit_lambda(lam, inner)
            end = self.new_mark(inner, node, "ms")
            value = _Value(start, end)
            self.emit({"log": {"priority": "I", "tag": "DroidUnblocker",
                               "parts": ["elapsed=", value.as_part(), "ms"]}}, inner, node)
            return value
        return None

    def value_of(self, node: Node | None, ctx: Ctx) -> _Value | None:
        """A timing value, when this expression computes one (emitting the end mark)."""
        if node is None:
            return None
        t = node.type
        if t in ("parenthesized_expression", "value_argument") and node.named_children:
            return self.value_of(node.named_children[-1], ctx)
        if t == "identifier":
            return self.w.values.get(text(node))
        if t == "navigation_expression" and len(node.children) >= 3:
            member = text(node.children[-1])
            inner = self.value_of(node.children[0], ctx)
            if inner is None:
                if member == "elapsedNow" or text(node).endswith("elapsedNow()"):
                    return None
                return None
            if member in ("inWholeMilliseconds",):
                return replace(inner, unit="ms", fmt="int")
            if member in ("inWholeNanoseconds",):
                return replace(inner, unit="ns", fmt="int")
            return inner
        if t == "call_expression":
            callee = node.children[0]
            callee_text = text(callee)
            args = _args(node)
            if callee_text.endswith("NANOSECONDS.toMillis") and args:
                inner = self.value_of(args[0], ctx)
                return replace(inner, unit="ms", fmt="int") if inner else None
            if callee.type == "navigation_expression" and len(callee.children) >= 3:
                member = text(callee.children[-1])
                inner = self.value_of(callee.children[0], ctx)
                if inner is not None:
                    if member == "toDouble" or member == "toFloat":
                        return replace(inner, fmt="float")
                    return inner
                if member == "elapsedNow":
                    mark = self.w.marks.get(text(callee.children[0]))
                    if mark:
                        end = self.new_mark(ctx, node, "ms")
                        return _Value(mark, end, "ms", "duration")
            return None
        if t == "binary_expression":
            op = node.child_by_field_name("operator")
            left = node.child_by_field_name("left")
            right = node.child_by_field_name("right")
            if op is None or left is None or right is None:
                return None
            if text(op) == "-":
                start = self.w.marks.get(text(right))
                if start is None:
                    return None
                unit = self.w.mark_units.get(start, "ms")
                if _clock_unit(left) is not None:
                    end = self.new_mark(ctx, node, unit)
                elif text(left) in self.w.marks:
                    end = self.w.marks[text(left)]
                else:
                    return None
                return _Value(start, end, unit)
            if text(op) == "/":
                inner = self.value_of(left, ctx)
                divisor = _number(right)
                if inner is None or divisor is None:
                    return None
                is_float = right.type == "float_literal" or "." in text(right) or inner.fmt == "float"
                fmt = "float" if is_float else inner.fmt
                if divisor == 1_000_000 and inner.unit == "ns":
                    return replace(inner, unit="ms", fmt=fmt)
                if divisor == 1_000 and inner.unit == "ns":
                    return replace(inner, unit="us", fmt=fmt)
                if divisor == 1_000 and inner.unit == "us":
                    return replace(inner, unit="ms", fmt=fmt)
                if divisor == 1_000 and inner.unit == "ms":
                    return replace(inner, unit="s", fmt=fmt)
                return None
        return None

    def condition_of(self, node: Node | None, ctx: Ctx) -> dict[str, Any] | None:
        """``elapsed < 100`` (either side) as a condition on a timing value."""
        if node is None:
            return None
        if node.type == "parenthesized_expression" and node.named_children:
            return self.condition_of(node.named_children[0], ctx)
        if node.type != "binary_expression":
            return None
        op = node.child_by_field_name("operator")
        left = node.child_by_field_name("left")
        right = node.child_by_field_name("right")
        if op is None or left is None or right is None or text(op) not in ("<", "<=", ">", ">="):
            return None
        flip = {"<": ">", "<=": ">=", ">": "<", ">=": "<="}
        value = self.value_of(left, ctx)
        number = self.constant(right)
        operator = text(op)
        if value is None or number is None:
            value = self.value_of(right, ctx)
            number = self.constant(left)
            operator = flip[operator]
        if value is None or number is None:
            return None
        return {**value.as_part(), "op": operator, "value": number}

    def constant(self, node: Node) -> float | None:
        return _number(node)

    def assertion(self, name: str, args: list[Node], ctx: Ctx, node: Node) -> bool:
        if ctx.swallow:
            return True
        message = None
        if name == "fail":
            self.emit({"fail": self.message_of(args[0], ctx) if args else None}, ctx, node)
            return True
        if name == "TODO":
            reason = self.message_of(args[0], ctx) if args else None
            detail = f": {reason}" if isinstance(reason, str) else "."
            self.emit({"throw": "kotlin.NotImplementedError",
                       "message": f"An operation is not implemented{detail}"}, ctx, node)
            return True
        if name == "error" and args:
            self.emit({"throw": "java.lang.IllegalStateException",
                       "message": self.message_of(args[0], ctx)}, ctx, node)
            return True
        if name in ("assertTrue", "assertFalse", "check", "require") and args:
            cond_node = args[-1]
            if len(args) == 2 and name in ("assertTrue", "assertFalse"):
                message = self.message_of(args[0], ctx)
            negate = name == "assertFalse"
            literal = text(cond_node).strip()
            if literal in ("true", "false"):
                if (literal == "false") != negate:
                    if name in ("check", "require"):
                        cls = "java.lang.IllegalStateException" if name == "check" \
                            else "java.lang.IllegalArgumentException"
                        self.emit({"throw": cls, "message": "Check failed." if name == "check"
                                   else "Failed requirement."}, ctx, node)
                    else:
                        self.emit({"fail": message}, ctx, node)
                return True
            inner = cond_node.named_children[0] if cond_node.type == "value_argument" \
                and cond_node.named_children else cond_node
            cond = self.condition_of(inner, ctx)
            if cond is not None and name in ("assertTrue", "assertFalse"):
                self.emit({"assert": cond, "message": message, "negate": negate}, ctx, node)
                return True
            return False
        if name == "assertThat" and len(args) >= 2:
            matcher = args[-1]
            value_node = args[-2]
            if len(args) == 3:
                message = self.message_of(args[0], ctx)
            inner_val = value_node.named_children[0] if value_node.named_children else value_node
            value = self.value_of(inner_val, ctx)
            m = re.search(r"(lessThan|greaterThan|lessThanOrEqualTo|greaterThanOrEqualTo)"
                          r"\(\s*([0-9_]+)[lL]?\s*\)", text(matcher))
            if value is not None and m:
                op = {"lessThan": "<", "greaterThan": ">", "lessThanOrEqualTo": "<=",
                      "greaterThanOrEqualTo": ">="}[m.group(1)]
                cond = {**value.as_part(), "op": op, "value": float(m.group(2).replace("_", ""))}
                self.emit({"assert": cond, "message": message, "negate": False,
                           "style": "hamcrest", "matcher": m.group(1)}, ctx, node)
                return True
        return False

    def log_call(self, level: str, args: list[Node], ctx: Ctx, node: Node) -> None:
        tag_node = args[0].named_children[0] if args[0].named_children else args[0]
        tag = self.string_of(tag_node)
        if tag is None:
            return
        msg_node = args[1].named_children[0] if args[1].named_children else args[1]
        parts = self.parts_of(msg_node, ctx)
        if parts is None:
            return
        self.emit({"log": {"priority": _LOG_LEVELS[level], "tag": tag, "parts": parts}}, ctx, node)

    def string_of(self, node: Node) -> str | None:
        if node.type == "string_literal" and "$" not in text(node):
            return text(node)[1:-1]
        if node.type == "identifier":
            return self.scope.string_consts.get(text(node))
        if node.type == "navigation_expression" and text(node) == "DroidUnblocker.TAG":
            return "DroidUnblocker"
        if node.type == "navigation_expression":
            return self.scope.string_consts.get(text(node.children[-1]))
        return None

    def parts_of(self, node: Node, ctx: Ctx) -> list[Any] | None:
        """A message as text and timing values; None when it holds values we cannot know."""
        if node.type == "string_literal":
            parts: list[Any] = []
            pending_dollar = False
            for child in node.children:
                if child.type == "string_content":
                    raw = text(child)
                    if pending_dollar:
                        m = re.match(r"[A-Za-z_][A-Za-z0-9_]*", raw)
                        if m:
                            value = self.value_of_name(m.group(0))
                            if value is None:
                                const = self.scope.string_consts.get(m.group(0))
                                if const is None:
                                    return None
                                parts.append(const)
                            else:
                                parts.append(value.as_part())
                            raw = raw[m.end():]
                        else:
                            parts.append("$")
                        pending_dollar = False
                    if raw == "$":
                        pending_dollar = True
                        continue
                    parts.append(_unescape(raw))
                elif child.type == "interpolation":
                    inner = child.named_children[0] if child.named_children else None
                    value = self.value_of(inner, ctx)
                    if value is None:
                        const = self.string_of(inner) if inner is not None else None
                        if const is None:
                            return None
                        parts.append(const)
                    else:
                        parts.append(value.as_part())
                elif child.type == "escape_sequence":
                    parts.append(_unescape(text(child)))
            return parts
        if node.type == "binary_expression":
            op = node.child_by_field_name("operator")
            if op is not None and text(op) == "+":
                left_node = node.child_by_field_name("left")
                right_node = node.child_by_field_name("right")
                if left_node is None or right_node is None:
                    return None
                left = self.parts_of(left_node, ctx)
                right = self.parts_of(right_node, ctx)
                if left is None or right is None:
                    return None
                return left + right
        value = self.value_of(node, ctx)
        if value is not None:
            return [value.as_part()]
        const = self.string_of(node)
        return [const] if const is not None else None

    def value_of_name(self, name: str) -> _Value | None:
        return self.w.values.get(name)

    def message_of(self, node: Node | None, ctx: Ctx) -> str | list[Any] | None:
        if node is None:
            return None
        inner = node.named_children[0] if node.type == "value_argument" and node.named_children \
            else node
        parts = self.parts_of(inner, ctx)
        if parts is None:
            return text(inner)[1:-1] if inner.type == "string_literal" else None
        if all(isinstance(p, str) for p in parts):
            return "".join(parts)
        return parts  # rendered by the player, with the elapsed values it measured

    def policy_of(self, node: Node) -> dict[str, Any] | None:
        inner = node.named_children[0] if node.type == "value_argument" and node.named_children \
            else node
        chain = text(inner)
        if inner.type == "identifier":
            decl = self.scope.functions.get(text(inner))
            chain = text(decl) if decl is not None else self._val_text(text(inner)) or chain
        elif inner.type == "call_expression" and inner.children[0].type == "identifier":
            fn = self.scope.functions.get(text(inner.children[0]))
            if fn is not None:
                chain = text(fn)
            elif "defaultPolicy" in chain:
                return dict(DEFAULT_RULE_POLICY)
        elif "StrictModeRule.defaultPolicy" in chain:
            return dict(DEFAULT_RULE_POLICY)
        if not re.search(r"\b(Builder|LAX|permitAll|detect\w+|penalty\w+)\b", chain):
            return None
        detect: set[str] = set()
        for switch, kinds in _POLICY_KINDS.items():
            if re.search(rf"\b{switch}\s*\(", chain):
                detect.update(kinds)
        if "LAX" in chain or "permitAll" in chain:
            detect.clear()
        return {
            "detect": sorted(detect),
            "penalty_log": bool(re.search(r"\bpenaltyLog\s*\(", chain)),
            "death": bool(re.search(r"\bpenaltyDeath\s*\(", chain)),
            "death_on_network": bool(re.search(r"\bpenaltyDeathOnNetwork\s*\(", chain)),
        }

    def _val_text(self, name: str) -> str | None:
        for tree in self.file.trees:
            for node in walk(tree.root_node):
                if node.type == "property_declaration":
                    decl = next((c for c in node.children if c.type == "variable_declaration"),
                                None)
                    if decl is not None and decl.children and text(decl.children[0]) == name:
                        init = after_eq(node)
                        return text(init) if init is not None else None
        return None

    def qualify_exception(self, simple: str) -> str:
        if simple in _JAVA_LANG:
            return f"java.lang.{simple}"
        if simple == "NotImplementedError":
            return "kotlin.NotImplementedError"
        for imp in self.scope.imports:
            if not imp.star and (imp.alias or imp.parts[-1][0]) == simple:
                return imp.path
        if simple in self.scope.declared and self.scope.package:
            return f"{self.scope.package}.{simple}"
        return simple


# --- small syntax helpers


def _args(call: Node) -> list[Node]:
    out: list[Node] = []
    for child in call.children:
        if child.type == "value_arguments":
            out.extend(c for c in child.children if c.type == "value_argument")
        elif child.type == "call_expression" and child is call.children[0]:
            out.extend(_args(child))
    return out


def _trailing_lambda(call: Node) -> Node | None:
    for child in call.children:
        if child.type == "annotated_lambda":
            return child
    args = _args(call)
    if args and args[-1].named_children and args[-1].named_children[0].type == "lambda_literal":
        return args[-1].named_children[0]
    return None


def _awaited(call: Node) -> bool:
    """``launch { … }.join()`` / ``async { … }.await()`` / ``submit { … }.get()``."""
    parent = call.parent
    return (parent is not None and parent.type == "navigation_expression"
            and parent.children[0].id == call.id
            and text(parent.children[-1]) in ("join", "await", "get"))


def _lambda_bindings(fn: Node, call: Node) -> dict[str, Node]:
    """Parameter name → lambda literal, for the lambdas a call passes to a helper function."""
    params_node = next((c for c in fn.children if c.type == "function_value_parameters"), None)
    names = [text(p.children[0]) for p in (params_node.children if params_node else [])
             if p.type == "parameter" and p.children]
    values: list[Node | None] = []
    for arg in _args(call):
        inner = arg.named_children[-1] if arg.named_children else None
        values.append(inner if inner is not None and inner.type == "lambda_literal" else None)
    trailing = next((c for c in call.children if c.type == "annotated_lambda"), None)
    if trailing is not None:
        values.append(next((c for c in trailing.children if c.type == "lambda_literal"), None))
    return {n: v for n, v in zip(names, values, strict=False) if v is not None}


def _clock_unit(node: Node) -> str | None:
    if node.type != "call_expression":
        return None
    callee = node.children[0]
    if callee.type != "navigation_expression" or len(callee.children) < 3:
        return None
    owner, name = text(callee.children[0]), text(callee.children[-1])
    if owner in ("SystemClock", "System") and name in _MS_CLOCKS:
        return "ms"
    if owner in ("SystemClock", "System") and name in _NS_CLOCKS:
        return "ns"
    if name == "markNow":
        return "ms"
    return None


def _number(node: Node) -> float | None:
    raw = text(node).strip().rstrip("lLfF").replace("_", "")
    try:
        return float(raw)
    except ValueError:
        return None


def _int_literal(node: Node) -> int | None:
    inner = node.named_children[0] if node.type == "value_argument" and node.named_children \
        else node
    value = _number(inner)
    return int(value) if value is not None and value >= 0 else None


def _range_count(node: Node) -> int | None:
    node_text = text(node).replace(" ", "").strip("()")
    m = re.fullmatch(r"(\d+)(\.\.|until|downTo)(\d+)", node_text)
    if m is None:
        return None
    a, op, b = int(m.group(1)), m.group(2), int(m.group(3))
    if op == "..":
        return max(0, b - a + 1)
    if op == "until":
        return max(0, b - a)
    return max(0, a - b + 1)


def _unescape(raw: str) -> str:
    return raw.replace("\\n", "\n").replace("\\t", "\t").replace('\\"', '"').replace("\\$", "$") \
        .replace("\\\\", "\\")


def _annotations(fn: Node) -> list[str]:
    mods = next((c for c in fn.children if c.type == "modifiers"), None)
    names = []
    if mods is not None:
        for ann in mods.children:
            if ann.type == "annotation":
                ut = next((c for c in walk(ann) if c.type == "user_type"), None)
                if ut is not None:
                    names.append(text(ut).split(".")[-1].split("<")[0])
    # loose tokens in ERROR recovery: annotation siblings just before `fun`
    prev = fn.prev_sibling
    while prev is not None and prev.type in ("annotation", "modifiers"):
        for ut in (c for c in walk(prev) if c.type == "user_type"):
            names.append(text(ut).split(".")[-1])
        prev = prev.prev_sibling
    return names


def _is_test_function(fn: Node) -> bool:
    return "Test" in _annotations(fn)


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
        if not _is_test_function(fn):
            continue
        annotations = _annotations(fn)
        ignored = "Ignore" in annotations or cls in class_ignored
        ex = _Extractor(file, scope, app, cls)
        ctx = Ctx(frame=method)
        if scope.scenario_rules or scope.activity_rules:
            ex.emit({"launch": app.activity}, ctx)
        if _has_strictmode_rule(file):
            ex.emit({"policy": dict(DEFAULT_RULE_POLICY), "rule": True}, replace(ctx, thread="main"))
            ex.emit({"policy": dict(DEFAULT_RULE_POLICY), "rule": True}, ctx)
        for (other_cls, _other), (other_fn, _) in functions.items():
            if other_cls == cls and "Before" in _annotations(other_fn):
                _visit_body(ex, other_fn, ctx)
        body_ctx = ctx
        if "UiThreadTest" in annotations:
            body_ctx = ex.main_ctx(ctx, "UiThreadTest")
            body_ctx = replace(body_ctx, frame=method)
        _visit_body(ex, fn, body_ctx)
        for (other_cls, _other), (other_fn, _) in functions.items():
            if other_cls == cls and "After" in _annotations(other_fn):
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


def _visit_body(ex: _Extractor, fn: Node, ctx: Ctx) -> None:
    body = next((c for c in fn.children if c.type == "function_body"), None)
    if body is not None:
        ex.visit(body, ctx)


def _has_strictmode_rule(file: KotlinFile) -> bool:
    return (bool(re.search(r"\bStrictModeRule\s*\(", file.source)) and "@get:Rule" in file.source) \
        or bool(re.search(r"@Rule[\s\S]{0,200}StrictModeRule\s*\(", file.source))

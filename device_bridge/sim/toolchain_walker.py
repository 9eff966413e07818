"""Walking a test's statements into steps: which thread each runs on (the test thread,
the main thread through ``runOnMainSync``/``runOnUiThread``/scenarios, background threads and
executors), helper functions inlined, constant loops unrolled, branches on timing values,
throws, assertions, ``Log`` calls, StrictMode policies and the demo app's methods called.
The expressions themselves are read by :class:`~device_bridge.sim.toolchain_values.
ExpressionReader`, which :class:`StepWalker` extends.
"""

from __future__ import annotations

import re
from dataclasses import replace

from tree_sitter import Node

from device_bridge.sim.toolchain_kotlin import after_eq, text, walk
from device_bridge.sim.toolchain_resolve import extension_receiver, is_activity_expr
from device_bridge.sim.toolchain_values import (
    DEFAULT_RULE_POLICY,
    LOG_LEVELS,
    Ctx,
    ExpressionReader,
    Step,
    TimingValue,
    call_args,
    clock_unit,
    number_of,
)

__all__ = [
    "MAX_INLINE_DEPTH",
    "MAX_LOOP",
    "MAX_VISITS",
    "StepWalker",
    "annotation_names",
    "is_test_function",
]

MAX_LOOP = 20  # constant loops are unrolled up to this many iterations
MAX_INLINE_DEPTH = 4
MAX_VISITS = 20_000

_MAIN_RUNNERS = {"runOnMainSync", "runOnUiThread", "post", "postAtFrontOfQueue"}
_BACKGROUND_RUNNERS = {"thread", "execute", "submit", "Thread", "start"}
_ASSERTIONS = frozenset(
    {"fail", "assertTrue", "assertFalse", "assertThat", "error", "TODO", "check", "require"}
)


class StepWalker(ExpressionReader):
    """The steps of one test, statement by statement (:meth:`visit`)."""

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
        clock = clock_unit(init)
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
            message = self.message_of(call_args(exc)[0] if call_args(exc) else None, ctx)
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
        args = call_args(node)
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
        if name in LOG_LEVELS and recv_text == "Log" and len(args) >= 2:
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
            if not is_test_function(fn) and (receiver is None or on_activity):
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
    def measure_call(self, node: Node, ctx: Ctx) -> TimingValue | None:
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
            return TimingValue(start, end, unit, fmt)
        if recv == "DroidUnblocker" and name in ("measure", "measureOnMainThread"):
            inner = ctx if name == "measure" else self.main_ctx(ctx, "runOnMainSync")
            start = self.new_mark(inner, node, "ms")
            self.visit_lambda(lam, inner)
            end = self.new_mark(inner, node, "ms")
            value = TimingValue(start, end)
            self.emit({"log": {"priority": "I", "tag": "DroidUnblocker",
                               "parts": ["elapsed=", value.as_part(), "ms"]}}, inner, node)
            return value
        return None


# --- small syntax helpers


def _trailing_lambda(call: Node) -> Node | None:
    for child in call.children:
        if child.type == "annotated_lambda":
            return child
    args = call_args(call)
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
    for arg in call_args(call):
        inner = arg.named_children[-1] if arg.named_children else None
        values.append(inner if inner is not None and inner.type == "lambda_literal" else None)
    trailing = next((c for c in call.children if c.type == "annotated_lambda"), None)
    if trailing is not None:
        values.append(next((c for c in trailing.children if c.type == "lambda_literal"), None))
    return {n: v for n, v in zip(names, values, strict=False) if v is not None}


def _int_literal(node: Node) -> int | None:
    inner = node.named_children[0] if node.type == "value_argument" and node.named_children \
        else node
    value = number_of(inner)
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


def annotation_names(fn: Node) -> list[str]:
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


def is_test_function(fn: Node) -> bool:
    return "Test" in annotation_names(fn)

"""Reading a test's expressions into steps: timing values (clock readings and their
differences), conditions on them, JUnit assertions, ``Log`` messages and StrictMode policies,
and emitting the steps they make (``device_bridge.sim.toolchain_steps`` lists the kinds).

:class:`ExpressionReader` holds one test's walk (:class:`TestWalk`) and what a step is emitted
with (:class:`Ctx`: thread, dispatch, frame); :class:`~device_bridge.sim.toolchain_walker.
StepWalker` builds the statements on it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Any

from tree_sitter import Node

from device_bridge.sim.behaviour import DemoApp
from device_bridge.sim.toolchain_kotlin import KotlinFile, after_eq, line_of, text, walk
from device_bridge.sim.toolchain_resolve import Scope

__all__ = [
    "DEFAULT_RULE_POLICY",
    "LOG_LEVELS",
    "MAX_STEPS",
    "Ctx",
    "ExpressionReader",
    "Step",
    "TestWalk",
    "TimingValue",
    "call_args",
    "clock_unit",
    "number_of",
]

Step = dict[str, Any]

MAX_STEPS = 2_000

_MS_CLOCKS = {"elapsedRealtime", "uptimeMillis", "currentTimeMillis", "currentThreadTimeMillis"}
_NS_CLOCKS = {"nanoTime", "elapsedRealtimeNanos"}
LOG_LEVELS = {"v": "V", "d": "D", "i": "I", "w": "W", "e": "E", "wtf": "F"}
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
class TimingValue:
    """A timing value: elapsed between two marks, in a unit."""

    start: str
    end: str
    unit: str = "ms"
    fmt: str = "int"

    def as_part(self) -> dict[str, Any]:
        return {"elapsed": [self.start, self.end], "unit": self.unit, "format": self.fmt}


@dataclass
class TestWalk:
    steps: list[Step] = field(default_factory=list)
    marks: dict[str, str] = field(default_factory=dict)  # variable → mark id (clock readings)
    mark_units: dict[str, str] = field(default_factory=dict)  # mark id → clock unit
    values: dict[str, TimingValue] = field(default_factory=dict)  # variable → elapsed value
    returned: TimingValue | None = None  # the timing value an inlined helper returned
    # function-typed parameters of the helpers being inlined → the lambdas passed for them
    lambda_args: list[dict[str, Node]] = field(default_factory=list)
    counter: int = 0
    visits: int = 0
    dispatches: int = 0
    lambdas: int = 0
    threads: int = 0


class ExpressionReader:
    """One test's walk and the expressions read on it; the statements are
    :class:`~device_bridge.sim.toolchain_walker.StepWalker`'s."""

    def __init__(self, file: KotlinFile, scope: Scope, app: DemoApp, class_name: str):
        self.file = file
        self.scope = scope
        self.app = app
        self.class_name = class_name
        self.w = TestWalk()

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

    # --- expressions
    def value_of(self, node: Node | None, ctx: Ctx) -> TimingValue | None:
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
            args = call_args(node)
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
                        return TimingValue(mark, end, "ms", "duration")
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
                if clock_unit(left) is not None:
                    end = self.new_mark(ctx, node, unit)
                elif text(left) in self.w.marks:
                    end = self.w.marks[text(left)]
                else:
                    return None
                return TimingValue(start, end, unit)
            if text(op) == "/":
                inner = self.value_of(left, ctx)
                divisor = number_of(right)
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
        return number_of(node)

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
        self.emit({"log": {"priority": LOG_LEVELS[level], "tag": tag, "parts": parts}}, ctx, node)

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

    def value_of_name(self, name: str) -> TimingValue | None:
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


def call_args(call: Node) -> list[Node]:
    out: list[Node] = []
    for child in call.children:
        if child.type == "value_arguments":
            out.extend(c for c in child.children if c.type == "value_argument")
        elif child.type == "call_expression" and child is call.children[0]:
            out.extend(call_args(child))
    return out


def clock_unit(node: Node) -> str | None:
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


def number_of(node: Node) -> float | None:
    raw = text(node).strip().rstrip("lLfF").replace("_", "")
    try:
        return float(raw)
    except ValueError:
        return None


def _unescape(raw: str) -> str:
    return raw.replace("\\n", "\n").replace("\\t", "\t").replace('\\"', '"').replace("\\$", "$") \
        .replace("\\\\", "\\")

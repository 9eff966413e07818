"""Name resolution for the simulated compiler: what would kotlinc call unresolved?

A deliberately small model of Kotlin's rules, tuned to say "resolves" when unsure (a false
error sends a valid test into the fixer loop; a missed one only costs realism):

* imports are checked against :mod:`toolchain_libraries` and the demo project's sources;
* a free name (a call, a type, an annotation, the receiver of ``a.b``) must be declared in the
  file, imported, in the file's package, or a Kotlin/Java default import;
* a member used on a ``MainActivity`` instance must exist in ``MainActivity.kt`` (or be an
  ``Activity`` member), be visible, and get at most as many arguments as it declares.

Local scopes are not modelled: a name declared anywhere in the file counts as declared.
Inside anonymous objects and ``with``/``apply``/``run`` lambdas (implicit receivers) free
names are not checked at all.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from tree_sitter import Node

from device_bridge.sim.behaviour import DemoApp
from device_bridge.sim.toolchain_kotlin import (
    KotlinFile,
    Problem,
    after_eq,
    col_of,
    line_of,
    text,
    walk,
)
from device_bridge.sim.toolchain_libraries import (
    ACTIVITY_MEMBERS,
    DEFAULT_NAMES,
    NOT_ON_CLASSPATH,
    OPEN_ROOTS,
    PACKAGES,
    known_packages,
    name_index,
)

__all__ = [
    "Scope",
    "build_scope",
    "check_file",
    "extension_receiver",
    "is_activity_expr",
    "lambda_call_name",
]

_SOFT_KEYWORDS = frozenset(
    "get set field value it by where init constructor data inner out in reified vararg "
    "crossinline noinline suspend operator infix tailrec external annotation sealed lateinit "
    "expect actual file param property receiver setparam delegate dynamic import this super "
    "class object fun val var true false null return break continue throw".split()
)
_RECEIVER_SCOPE_FUNCTIONS = frozenset({"with", "apply", "run", "buildString", "buildList"})
# Lambdas whose (first) parameter is the activity under test.
_ACTIVITY_LAMBDAS = frozenset({"onActivity", "ActivityAction"})
# Calls whose lambda takes no parameter: an `it` inside belongs to an enclosing lambda.
_NO_PARAM_LAMBDAS = frozenset({
    "measure", "measureOnMainThread", "measureTimeMillis", "measureNanoTime", "measureTime",
    "run", "apply", "with", "synchronized", "runOnMainSync", "runOnUiThread", "thread",
    "Thread", "execute", "submit", "post", "withContext", "runBlocking", "launch", "async",
    "runTest", "lazy", "buildString", "assertThrows", "Runnable",
})
_DECL_TOKENS = frozenset({"fun", "class", "object", "interface", "val", "var", "typealias"})
_DECL_PARENTS = frozenset(
    {"variable_declaration", "parameter", "class_parameter", "type_parameter", "enum_entry",
     "type_alias", "catch_block", "lambda_parameters", "function_declaration",
     "class_declaration", "object_declaration"}
)
_KNOWN_PACKAGES = known_packages()
_NAME_INDEX = name_index()


@dataclass
class Import:
    parts: list[tuple[str, Node]]
    star: bool
    alias: str | None
    node: Node

    @property
    def path(self) -> str:
        return ".".join(p for p, _ in self.parts)


@dataclass
class Scope:
    """What the file declares and imports, and which names hold a ``MainActivity``."""

    package: str | None
    imports: list[Import]
    imported: set[str] = field(default_factory=set)
    open_star: bool = False
    declared: set[str] = field(default_factory=set)
    activity_names: set[str] = field(default_factory=set)  # vals/params typed MainActivity
    activity_lambdas: set[int] = field(default_factory=set)  # lambdas given the activity
    activity_rules: set[str] = field(default_factory=set)  # ActivityTestRule properties
    scenario_rules: set[str] = field(default_factory=set)  # ActivityScenarioRule properties
    string_consts: dict[str, str] = field(default_factory=dict)
    functions: dict[str, Node] = field(default_factory=dict)  # the file's own functions


def _is_declaration(node: Node) -> bool:
    parent = node.parent
    if parent is None:
        return False
    prev = node.prev_sibling
    if prev is not None and prev.type in _DECL_TOKENS:
        return True
    if parent.type in ("parameter", "class_parameter", "catch_block"):
        first = next((c for c in parent.children if c.type == "identifier"), None)
        return first is not None and first.id == node.id
    if parent.type in ("function_declaration", "class_declaration", "object_declaration"):
        return parent.child_by_field_name("name") == node or (
            prev is not None and prev.type in _DECL_TOKENS
        )
    return parent.type in _DECL_PARENTS and parent.type not in (
        "function_declaration", "class_declaration", "object_declaration"
    )


def _imports(file: KotlinFile) -> list[Import]:
    out: list[Import] = []
    for node in walk(file.tree.root_node):
        if node.type != "import":
            continue
        qid = next((c for c in node.children if c.type == "qualified_identifier"), None)
        if qid is None:
            continue
        parts = [(text(c), c) for c in qid.children if c.type == "identifier"]
        star = any(c.type == "*" for c in node.children)
        alias = None
        children = list(node.children)
        for i, c in enumerate(children):
            if c.type == "as" and i + 1 < len(children):
                alias = text(children[i + 1])
        out.append(Import(parts, star, alias, node))
    return out


def _package(file: KotlinFile) -> str | None:
    for node in file.tree.root_node.children:
        if node.type == "package_header":
            qid = next((c for c in node.children if c.type == "qualified_identifier"), None)
            return text(qid).replace(" ", "") if qid is not None else None
    return None


def _declared_type(node: Node) -> str | None:
    """The declared type of a variable or parameter, ``?`` removed: ``MainActivity``."""
    for child in node.children:
        if child.type in ("user_type", "nullable_type"):
            return text(child).rstrip("?").strip()
    return None


def build_scope(file: KotlinFile, app: DemoApp) -> Scope:
    scope = Scope(package=_package(file), imports=_imports(file))
    activity_simple = app.activity.rsplit(".", 1)[-1]
    for tree in file.trees:
        for node in walk(tree.root_node):
            if node.type == "identifier" and _is_declaration(node):
                scope.declared.add(text(node))
            if node.type == "function_declaration":
                name = node.child_by_field_name("name")
                if name is not None and text(name) not in scope.functions:
                    scope.functions[text(name)] = node
            if node.type in ("variable_declaration", "parameter", "class_parameter"):
                ident = next((c for c in node.children if c.type == "identifier"), None)
                if ident is None:
                    continue
                var_name = text(ident)
                if _declared_type(node) in (activity_simple, f"{app.activity}"):
                    scope.activity_names.add(var_name)
                init = _initializer(node)
                if init is not None:
                    init_text = text(init)
                    if init.type == "string_literal" and "$" not in init_text:
                        scope.string_consts[var_name] = init_text.strip('"')
                    if "ActivityTestRule" in init_text and activity_simple in init_text:
                        scope.activity_rules.add(var_name)
                    if ("ActivityScenarioRule" in init_text or "activityScenarioRule" in init_text) \
                            and activity_simple in init_text:
                        scope.scenario_rules.add(var_name)
                    if init_text.replace(" ", "") == f"{activity_simple}()":
                        scope.activity_names.add(var_name)
    # names brought in by imports
    for imp in scope.imports:
        if imp.star:
            names = PACKAGES.get(imp.path)
            if names is not None:
                scope.imported |= names
            elif imp.path == app.package:
                scope.imported |= _package_names(app)
            else:
                scope.open_star = True
        else:
            scope.imported.add(imp.alias or imp.parts[-1][0])
    if scope.package == app.package:
        scope.imported |= _package_names(app)
    # `val activity = rule.activity` / `= scenario...` — one more pass now rules are known
    for tree in file.trees:
        for node in walk(tree.root_node):
            if node.type == "variable_declaration" and node.parent is not None:
                init = _initializer(node)
                ident = next((c for c in node.children if c.type == "identifier"), None)
                if init is not None and ident is not None and is_activity_expr(init, scope):
                    scope.activity_names.add(text(ident))
    return scope


def _package_names(app: DemoApp) -> set[str]:
    return {app.activity.rsplit(".", 1)[-1], "R", *app.helpers}


def _initializer(decl: Node) -> Node | None:
    """The expression after ``=`` of a property declaration (decl is its variable_declaration)."""
    parent = decl.parent
    if parent is None or parent.type != "property_declaration":
        return None
    return after_eq(parent)


def lambda_call_name(lam: Node) -> str | None:
    """The name of the call a lambda literal is the (trailing or only) argument of."""
    node = lam.parent
    if node is not None and node.type == "annotated_lambda":
        node = node.parent
    elif node is not None and node.type == "value_argument":
        node = node.parent.parent if node.parent is not None else None
    if node is None or node.type != "call_expression" or not node.children:
        return None
    callee = node.children[0]
    if callee.type == "call_expression" and callee.children:  # withContext(X) { … }
        callee = callee.children[0]
    if callee.type == "identifier":
        return text(callee)
    if callee.type == "navigation_expression" and callee.children:
        return text(callee.children[-1])
    return None


def _lambda_param_names(lam: Node) -> list[str]:
    params = next((c for c in lam.children if c.type == "lambda_parameters"), None)
    if params is None:
        return []
    return [text(i) for v in params.children if v.type == "variable_declaration"
            for i in v.children[:1] if i.type == "identifier"]


def is_activity_expr(node: Node, scope: Scope) -> bool:
    """Does this expression evaluate to the ``MainActivity`` under test (as far as we can tell)?"""
    while node.type in ("parenthesized_expression", "unary_expression", "value_argument") \
            and node.named_children:
        node = node.named_children[0]
    if node.type == "identifier":
        name = text(node)
        anc = node.parent
        while anc is not None:
            if anc.type == "lambda_literal":
                params = _lambda_param_names(anc)
                call = "onActivity" if anc.id in scope.activity_lambdas else lambda_call_name(anc)
                if params and params[0] == name:
                    return call in _ACTIVITY_LAMBDAS
                if not params and name == "it" and call not in _NO_PARAM_LAMBDAS:
                    return call in _ACTIVITY_LAMBDAS
            anc = anc.parent
        return name in scope.activity_names
    if node.type == "navigation_expression" and len(node.children) >= 3:
        recv, member = node.children[0], node.children[-1]
        if text(member) == "activity" and text(recv) in scope.activity_rules:
            return True
    return False


def _import_problem(imp: Import, app: DemoApp, own_classes: set[str]) -> Problem | None:
    path = imp.path
    parts = imp.parts
    for missing in NOT_ON_CLASSPATH:
        if path == missing or path.startswith(missing + "."):
            k = missing.count(".")
            return _unresolved(parts[k][1], parts[k][0])
    if any(path.startswith(root) or path + "." == root for root in OPEN_ROOTS):
        return None
    if path == app.package or path.startswith(app.package + "."):
        rest = path[len(app.package) + 1 :].split(".") if path != app.package else []
        visible = _package_names(app) | own_classes
        if not rest or rest[0] in visible or (imp.star and not rest):
            return None
        # a sub-package of the app (e.g. com.droidwire.demo.examples) holding only tests
        k = app.package.count(".") + 1
        return _unresolved(parts[k][1], parts[k][0])
    for k in range(len(parts)):
        prefix = ".".join(p for p, _ in parts[: k + 1])
        parent = ".".join(p for p, _ in parts[:k])
        if prefix in _KNOWN_PACKAGES or prefix in PACKAGES or \
                (app.package + ".").startswith(prefix + "."):
            continue
        if parent in PACKAGES and parts[k][0] in PACKAGES[parent]:
            if prefix not in PACKAGES:
                return None  # a member with nothing listed below it: accept the rest
            continue
        return _unresolved(parts[k][1], parts[k][0])
    return None


def _unresolved(node: Node, name: str) -> Problem:
    return Problem(line_of(node), node.start_point[1] + 1, f"Unresolved reference '{name}'.")


def _in_receiver_scope(node: Node) -> bool:
    anc = node.parent
    while anc is not None:
        if anc.type == "object_literal":
            return True
        if anc.type == "lambda_literal" and lambda_call_name(anc) in _RECEIVER_SCOPE_FUNCTIONS:
            return True
        if anc.type == "function_declaration" and extension_receiver(anc) is not None:
            return True
        anc = anc.parent
    return False


def extension_receiver(fn: Node) -> str | None:
    """``fun MainActivity.timed()`` → ``"MainActivity"``; None for an ordinary function."""
    children = fn.children
    for i, child in enumerate(children[:-1]):
        if child.type == "user_type" and children[i + 1].type == ".":
            return text(child).split("<", 1)[0]
        if child.type in ("function_value_parameters", "function_body"):
            break
    return None


def _should_check(node: Node) -> bool:
    parent = node.parent
    if parent is None:
        return False
    if parent.type in ("import", "package_header", "qualified_identifier", "label",
                       "use_site_target", "type_test_label"):
        return False
    if _is_declaration(node):
        return False
    prev = node.prev_sibling
    if prev is not None and (prev.type == "label" or text(prev).endswith("@")):
        return False
    if parent.type in ("navigation_expression", "user_type"):
        return parent.children[0].id == node.id
    if parent.type == "infix_expression":
        named = parent.named_children
        return not (len(named) == 3 and named[1].id == node.id)
    if parent.type == "value_argument":
        nxt = node.next_sibling
        return not (nxt is not None and nxt.type == "=")
    if parent.type == "this_expression" or parent.type == "super_expression":
        return False
    return parent.field_name_for_child(
        next(i for i, c in enumerate(parent.children) if c.id == node.id)
    ) != "label"


def check_file(file: KotlinFile, app: DemoApp, scope: Scope) -> list[Problem]:
    """Every unresolved reference and misuse of ``MainActivity`` members, in source order."""
    problems: list[Problem] = []
    own_classes = scope.declared
    for imp in scope.imports:
        problem = _import_problem(imp, app, own_classes)
        if problem is not None:
            problems.append(problem)
    visible = scope.declared | scope.imported | DEFAULT_NAMES | _SOFT_KEYWORDS
    seen: set[tuple[int, int]] = set()
    activity_members = app.all_members | ACTIVITY_MEMBERS
    activity_class = app.activity.rsplit(".", 1)[-1]
    for tree in file.trees:
        for node in walk(tree.root_node):
            if node.type == "identifier" and _should_check(node):
                name = text(node)
                if name in visible or name.startswith("`"):
                    continue
                if scope.open_star and name not in _NAME_INDEX:
                    continue
                if _in_receiver_scope(node):
                    continue
                if name in _PACKAGE_ROOTS and node.parent is not None and node.parent.type in (
                    "navigation_expression", "user_type"
                ):
                    continue  # a fully qualified name (androidx.test.…): not a reference
                _add(problems, seen, Problem(line_of(node), col_of(file, node),
                                             f"Unresolved reference '{name}'."))
            elif node.type == "navigation_expression" and len(node.children) >= 3:
                recv, member = node.children[0], node.children[-1]
                if (member.type == "identifier" and recv.type == "identifier"
                        and text(recv) == activity_class and activity_class not in scope.declared
                        and app.static_members
                        and text(member) not in app.static_members | _CLASS_MEMBERS):
                    # MainActivity.SOME_CONSTANT: the companion has no such member
                    _add(problems, seen, Problem(line_of(member), col_of(file, member),
                                                 f"Unresolved reference '{text(member)}'."))
                    continue
                if member.type != "identifier" or not is_activity_expr(recv, scope):
                    continue
                name = text(member)
                pos = (line_of(member), col_of(file, member))
                if name in app.private_members:
                    sig = _private_signature(app, name)
                    _add(problems, seen, Problem(*pos, (
                        f"Cannot access '{sig}': it is private in '{app.activity}'.")))
                elif name not in activity_members and name not in scope.functions:
                    _add(problems, seen, Problem(*pos, f"Unresolved reference '{name}'."))
                elif name in app.methods:
                    problem = _arity_problem(file, node, app, name)
                    if problem is not None:
                        _add(problems, seen, problem)
    problems.sort(key=lambda p: (p.line, p.column))
    return problems


# First segments of package names that a fully qualified reference starts with.
_PACKAGE_ROOTS = frozenset({"android", "androidx", "java", "javax", "kotlin", "kotlinx", "org",
                            "dalvik", "junit"})
# What ``MainActivity.X`` may name besides the class's own members.
_CLASS_MEMBERS = frozenset({"Companion", "class", "javaClass"})


def _add(problems: list[Problem], seen: set[tuple[int, int]], problem: Problem) -> None:
    key = (problem.line, problem.column)
    if key not in seen:
        seen.add(key)
        problems.append(problem)


def _private_signature(app: DemoApp, name: str) -> str:
    return app.signatures.get(name, f"fun {name}()")


def _arity_problem(file: KotlinFile, nav: Node, app: DemoApp, name: str) -> Problem | None:
    call = nav.parent
    if call is None or call.type != "call_expression" or call.children[0].id != nav.id:
        return None
    args: list[Node] = []
    for child in call.children[1:]:
        if child.type == "value_arguments":
            args.extend(c for c in child.children if c.type == "value_argument")
        elif child.type == "annotated_lambda":
            args.append(child)
    method = app.methods[name]
    params = method.params
    shown = re.sub(r"\s*=\s*(\{[^}]*\}|[^,)]+)", " = ...", method.signature.replace("\n", " "))
    if len(args) > len(params):
        extra = args[len(params)]
        return Problem(line_of(extra), col_of(file, extra), f"Too many arguments for '{shown}'.")
    named = {text(a.children[0]) for a in args
             if a.type == "value_argument" and len(a.children) > 1 and a.children[1].type == "="}
    positional = sum(1 for a in args if not (a.type == "value_argument" and len(a.children) > 1
                                             and a.children[1].type == "="))
    for i, (pname, has_default) in enumerate(params):
        if i >= positional and pname not in named and not has_default:
            end = call.children[-1]
            return Problem(end.end_point[0] + 1, end.end_point[1],
                           f"No value passed for parameter '{pname}'.")
    return None


def names_in(nodes: Iterable[Node]) -> set[str]:
    return {text(n) for n in nodes}

"""The user docs stay true: links resolve, shown commands parse, named contracts exist.

* Every relative link in ``docs/*.md`` and ``README.md`` points at an existing file.
* Every ``droidwire …`` command in a ```` ```sh ```` block of the pages listed in
  :data:`CHECKED_PAGES` parses with the real CLI (:func:`tests.deploy.support.cli_context`:
  unknown commands, unknown flags and missing arguments fail).
* The names the pages list are the code's: every MCP tool, every policy rule, every exit code
  and every PENDING reason code is documented, so a new one cannot go unmentioned.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from tests.deploy.support import cli_context

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
CHECKED_PAGES = ("index.md", "mcp.md", "cli.md", "security.md", "sandbox.md")

_LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
_FENCE = re.compile(r"^```(\w*)\s*$")
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=\S*$")
_SHELL_STOPS = {"|", "||", "&&", ";", ">", ">>", "<", "2>", "2>&1", "&"}


def _markdown_files() -> list[Path]:
    return [*sorted(DOCS.glob("*.md")), ROOT / "README.md"]


def _blocks(text: str) -> tuple[list[str], list[tuple[str, list[str]]]]:
    """The prose lines outside fences, and each fenced block as (language, lines)."""
    prose: list[str] = []
    blocks: list[tuple[str, list[str]]] = []
    current: list[str] | None = None
    for line in text.splitlines():
        fence = _FENCE.match(line.strip())
        if fence and current is None:
            current = []
            blocks.append((fence.group(1), current))
        elif line.strip().startswith("```") and current is not None:
            current = None
        elif current is not None:
            current.append(line)
        else:
            prose.append(line)
    return prose, blocks


def relative_links(text: str) -> list[str]:
    """Link targets in the prose that name a file of this repository (anchor dropped)."""
    prose, _ = _blocks(text)
    out: list[str] = []
    for line in prose:
        for target in _LINK.findall(line):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
                continue  # http:, https:, mailto: … and in-page anchors
            out.append(target.split("#", 1)[0])
    return out


def droidwire_commands(text: str) -> list[list[str]]:
    """The argv (after ``droidwire``) of every droidwire command in the ```sh blocks."""
    _, blocks = _blocks(text)
    commands: list[list[str]] = []
    for language, lines in blocks:
        if language not in ("sh", "bash", "shell"):
            continue
        joined = "\n".join(lines).replace("\\\n", " ")
        for line in joined.splitlines():
            words = shlex.split(line.strip().removeprefix("$ "), comments=True)
            while words and _ASSIGNMENT.match(words[0]):
                words.pop(0)
            if not words or words[0] != "droidwire":
                continue
            argv: list[str] = []
            for word in words[1:]:
                if word in _SHELL_STOPS:
                    break
                argv.append(word)
            commands.append(argv)
    return commands


# -- the helpers themselves -----------------------------------------------------------------


def test_link_finder_sees_links_and_skips_urls_anchors_and_code() -> None:
    text = (
        "See [a](cli.md#exit-codes), [b](../README.md), [c](https://x.example/y.md), "
        "[d](#here) and ![img](pic.png).\n```sh\n[e](missing.md)\n```\n"
    )
    assert relative_links(text) == ["cli.md", "../README.md"]


def test_command_finder_strips_env_pipes_and_continuations() -> None:
    text = (
        "```sh\nDROIDWIRE_TOKEN=x droidwire run t.kt \\\n  --json | jq .\n"
        "echo hi\n$ droidwire device list  # note\n```\n"
        "```json\ndroidwire not-a-command\n```\n"
    )
    assert droidwire_commands(text) == [["run", "t.kt", "--json"], ["device", "list"]]


def test_a_bad_command_is_refused_by_the_parser() -> None:
    with pytest.raises(Exception):  # noqa: B017 - typer's vendored click errors
        cli_context(["run", "t.kt", "--no-such-flag"])
    with pytest.raises(AssertionError):
        cli_context(["no-such-noun"])


# -- the docs -------------------------------------------------------------------------------


@pytest.mark.parametrize("page", _markdown_files(), ids=lambda p: p.name)
def test_relative_links_resolve(page: Path) -> None:
    broken = [
        target
        for target in relative_links(page.read_text(encoding="utf-8"))
        if not (page.parent / target).exists()
    ]
    assert not broken, f"{page.name}: broken links {broken}"


@pytest.mark.parametrize("name", CHECKED_PAGES)
def test_shown_commands_parse_with_the_real_cli(name: str) -> None:
    page = DOCS / name
    assert page.is_file(), f"docs/{name} is missing"
    for argv in droidwire_commands(page.read_text(encoding="utf-8")):
        try:
            cli_context(argv)
        except Exception as exc:  # report which command and why
            pytest.fail(f"docs/{name}: `droidwire {shlex.join(argv)}` does not parse: {exc!r}")


def test_the_pages_show_commands_at_all() -> None:
    total = sum(
        len(droidwire_commands((DOCS / name).read_text(encoding="utf-8")))
        for name in CHECKED_PAGES
    )
    assert total >= 30


def test_index_links_every_page() -> None:
    index = set(relative_links((DOCS / "index.md").read_text(encoding="utf-8")))
    missing = [p.name for p in DOCS.glob("*.md") if p.name != "index.md" and p.name not in index]
    assert not missing, f"docs/index.md does not link {missing}"


def test_every_mcp_tool_is_documented() -> None:
    from controller.mcp.tools import TOOLS

    text = (DOCS / "mcp.md").read_text(encoding="utf-8")
    missing = [name for name in TOOLS if f"`{name}`" not in text]
    assert not missing, f"docs/mcp.md does not describe {missing}"


def test_every_policy_rule_is_documented() -> None:
    from device_bridge.policy import Rule

    text = (DOCS / "security.md").read_text(encoding="utf-8")
    missing = [rule.value for rule in Rule if f"`{rule.value}`" not in text]
    assert not missing, f"docs/security.md does not name the rules {missing}"


def test_every_exit_code_is_documented() -> None:
    from droidwire.client import ExitCode

    text = (DOCS / "cli.md").read_text(encoding="utf-8")
    missing = [code for code in ExitCode if f"| {int(code)} |" not in text]
    assert not missing, f"docs/cli.md does not list exit codes {missing}"


def test_every_pending_reason_code_is_documented() -> None:
    from controller.executor.results import REASON_CODES

    text = (DOCS / "sandbox.md").read_text(encoding="utf-8")
    missing = [code for code in sorted(REASON_CODES) if f"`{code}`" not in text]
    assert not missing, f"docs/sandbox.md does not name the reason codes {missing}"


@pytest.mark.parametrize("name", CHECKED_PAGES)
def test_tables_keep_their_columns(name: str) -> None:
    """A ``|`` inside a table cell (say, in a code span) must be escaped, or the row breaks."""
    prose, _ = _blocks((DOCS / name).read_text(encoding="utf-8"))
    width: int | None = None
    for line in prose:
        if not line.startswith("|"):
            width = None
            continue
        cells = len(re.findall(r"(?<!\\)\|", line))
        if width is None:
            width = cells
        assert cells == width, f"docs/{name}: a table row with {cells - 1} columns: {line[:80]}"

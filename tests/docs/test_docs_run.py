"""Every client command the docs show runs as shown, against a live stack of real processes
(tests/droidwire/stack.py: ``droidwire controller``, ``sim-device`` and ``bridge``).

What changes, and nothing else (the placeholders of the pages):

* the example device ``R58M123ABC`` / ``pixel~R58M123ABC`` / ``127.0.0.1:5555`` is the stack's
  simulated phone (its serial, or its id ``my-desk~SERIAL``);
* the example run, token, grant and reservation ids are real ones made for each page (a
  finished run of the example test, a fresh user token, a fresh loan, a booking of the phone
  for ``bob`` in an hour of its own two days ahead, made only for a page that shows that id:
  the pages' own bookings are months ahead, and bob's loans do not conflict with his booking);
* the users and bridge the pages name exist: ``bob``, ``mallory`` and ``ci-bot`` (a user token
  each), ``pixel`` (a bridge token that never connected: the bridge ``device forget pixel
  --bridge`` retires); the phone is in pool ``ci`` and labelled ``lab-a`` (set by an admin);
* the example package ``com.example.app`` is real: ``build/app-debug.apk`` is an APK of it
  built for the simulated phone (``device_bridge.sim.apk``), installed by the page itself;
* the example files are made in the folder the commands run in: ``MyTest.kt`` (the example
  test of ``gradle-workspace``), ``run.log`` (that run's logcat), ``instrument.txt`` (``am
  instrument -r`` output) and ``build.log`` (a failed Kotlin compile), ``Suite.kt`` (the example test
  again, for ``--shard``), ``data.bin`` (bytes to push), next to a link to the
  clone's ``gradle-workspace`` (README's commands run at the clone's root);
* ``--until`` dates stay as written (the pages use future ones).

The servers (``controller``, ``bridge``, ``sim-device``) are what the stack itself runs, with
the flags of docs/index.md; ``demo`` and the recipes of docs/index.md run in
tests/docs/test_recipes.py, verbatim. A command exits 0 unless :data:`EXPECTED` names the
other outcome its page promises (a refused ``reboot``, ``--fail-on`` matching, …).
"""

from __future__ import annotations

import json
import shlex
import subprocess
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest

from device_bridge.sim.apk import SimPackage, build_apk
from tests.conftest import TIME_SCALE
from tests.docs.test_docs import CHECKED_PAGES, DOCS, ROOT, droidwire_commands
from tests.droidwire.stack import ADMIN, DROIDWIRE, Stack, live_stack

EXAMPLE = (ROOT / "gradle-workspace/app/src/androidTestExamples/java/com/droidwire/demo/examples"
           / "MainActivityExamplesTest.kt")
SERVERS = {"controller", "bridge", "sim-device", "demo"}
PAGES = [p for p in CHECKED_PAGES if p != "index.md"] + ["../README.md"]
RUN_ID, TOKEN_ID, GRANT_ID = ("0b5e2c7d9a1f4e3b8c6d2a0f1e9b7c5d",
                              "4c1f0e8a9b2d4e6f8a0b1c2d3e4f5a6b",
                              "9d8e7f6a5b4c4d3e8f1a2b3c4d5e6f70")
RESERVATION_ID = "5e0c1d2b3a4f4e5d8c7b6a5f4e3d2c1b"
PACKAGE = "com.example.app"
# command as the page shows it → (exit code, why the page expects it)
EXPECTED: dict[str, tuple[int, str]] = {
    "runs cancel 0b5e2c7d9a1f4e3b8c6d2a0f1e9b7c5d --no-wait":
        (1, "the example run is over: a finished run cannot be cancelled"),
    "run MyTest.kt --device 'sdk>=30' --device 2 --retries 1 --junit report.xml "
    "--fail-on CONFIRMED --fail-on PENDING": (1, "--fail-on CONFIRMED matches"),
    "device shell 127.0.0.1:5555 -- reboot": (3, "refused: rule reboot"),
    "device forget 'pixel~R58M123ABC'":
        (1, "conflict: the stack's phone is attached, and an attached device is not forgotten"),
}
INSTRUMENT = """INSTRUMENTATION_STATUS: class=com.example.FooTest
INSTRUMENTATION_STATUS: test=works
INSTRUMENTATION_STATUS_CODE: 1
INSTRUMENTATION_STATUS: class=com.example.FooTest
INSTRUMENTATION_STATUS: test=works
INSTRUMENTATION_STATUS_CODE: 0
INSTRUMENTATION_RESULT: stream=OK (1 test)
INSTRUMENTATION_CODE: -1
"""
BUILD_LOG = """> Task :app:compileDebugAndroidTestKotlin FAILED
e: file:///w/app/src/androidTest/java/com/example/FooTest.kt:12:9 Unresolved reference 'foo'.
FAILURE: Build failed with an exception.
BUILD FAILED in 3s
"""

pytestmark = [pytest.mark.adb, pytest.mark.timeout(1200 * TIME_SCALE)]


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with live_stack(tmp_path_factory.mktemp("docs-stack")) as live:
        for kind, name in (("user", "bob"), ("user", "mallory"), ("user", "ci-bot"),
                           ("bridge", "pixel")):
            assert live.cli("token", "create", "--kind", kind, name).code == 0
        labelled = httpx.put(f"{live.url}/v1/devices/{live.device_id}/labels",
                             json={"labels": ["lab-a"], "pool": "ci"},
                             headers={"Authorization": f"Bearer {ADMIN}"}, timeout=30)
        assert labelled.is_success, labelled.text
        (live.root / "build").mkdir()
        (live.root / "build/app-debug.apk").write_bytes(
            build_apk(SimPackage(package=PACKAGE, kind="app")))
        (live.root / "data.bin").write_bytes(bytes(range(256)) * 16)
        (live.root / "Suite.kt").write_text(EXAMPLE.read_text())
        (live.root / "MyTest.kt").write_text(EXAMPLE.read_text())
        (live.root / "gradle-workspace").symlink_to(ROOT / "gradle-workspace")
        done = live.cli("run", "MyTest.kt", "--json")
        assert done.code == 0, done.err
        run_id = json.loads(done.out)["results"][0]["run_id"]
        (live.root / "run.log").write_text(live.cli("runs", "show", run_id, "--logcat").out)
        (live.root / "instrument.txt").write_text(INSTRUMENT)
        (live.root / "build.log").write_text(BUILD_LOG)
        live.env["DOCS_RUN_ID"] = run_id
        yield live


def _new_id(stack: Stack, *args: str) -> str:
    done = stack.cli(*args, "--json")
    assert done.code == 0, done.err
    return str(json.loads(done.out)["id"])


def _substitute(argv: list[str], stack: Stack, ids: dict[str, str]) -> list[str]:
    out = []
    for word in argv:
        word = word.replace("pixel~R58M123ABC", stack.device_id)
        word = word.replace("R58M123ABC", stack.serial).replace("127.0.0.1:5555", stack.serial)
        for placeholder, real in ids.items():
            word = word.replace(placeholder, real)
        out.append(word)
    return out


def _follow(stack: Stack, argv: list[str], first_line: str) -> tuple[int, str]:
    """``logcat -f`` and ``device tunnel`` run until Ctrl-C: each runs, prints its first line
    (a chunk of log; the ``adb connect`` address), and stops on SIGINT."""
    with subprocess.Popen([DROIDWIRE, *argv], env=stack.env, cwd=stack.root,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as proc:
        try:
            assert proc.stdout is not None
            first = proc.stdout.readline()
            proc.send_signal(2)
            _, err = proc.communicate(timeout=60 * TIME_SCALE)
        finally:
            if proc.poll() is None:
                proc.kill()  # leaving the block closes its pipes and waits for it
    assert first.startswith(first_line), (first, err)
    return proc.returncode, err


@pytest.mark.parametrize("page", PAGES)
def test_every_shown_command_runs_as_shown(stack: Stack, page: str) -> None:
    ids = {
        RUN_ID: stack.env["DOCS_RUN_ID"],
        TOKEN_ID: _new_id(stack, "token", "create", "--kind", "user", f"docs-{Path(page).stem}"),
        GRANT_ID: _new_id(stack, "grant", "create", stack.serial, "bob", "--for", "1h"),
    }
    text = (DOCS / page).read_text(encoding="utf-8")
    if RESERVATION_ID in text:
        start = (datetime.now(UTC) + timedelta(days=2, hours=PAGES.index(page))).strftime(
            "%Y-%m-%dT%H:00Z")
        ids[RESERVATION_ID] = _new_id(stack, "reserve", "create", stack.serial, "bob",
                                      "--from", start, "--for", "1h")
    ran = 0
    failures = []
    for shown in droidwire_commands(text):
        if not shown or shown[0] in SERVERS:
            continue
        command = shlex.join(shown)
        argv = _substitute(shown, stack, ids)
        want, why = EXPECTED.get(command, (0, "ok"))
        if "-f" in argv and "logcat" in argv:
            code, err = _follow(stack, argv, "{")
        elif argv[:2] == ["device", "tunnel"]:
            code, err = _follow(stack, argv, "{" if "--json" in argv else "tunnel to ")
        else:
            done = stack.cli(*argv)
            code, err = done.code, done.err
        ran += 1
        if code != want or "Traceback" in err:
            failures.append(f"droidwire {command}\n  exit {code}, expected {want} ({why})\n  {err[-600:]}")
    assert ran, f"{page} shows no client command"
    assert not failures, f"docs/{page}:\n" + "\n".join(failures)

"""The agent recipes of docs/agent.md and docs/mcp.md, run as written: the owner's stack with
the phone under the ``agent`` profile, the agent's token and its loan, the agent's REST walk
(look, open system settings, go home, an instruction) and the MCP agent (list, state).

Recipes are found as in test_recipes.py (the ```sh block after ``<!-- recipe: NAME -->``), run
in order in one ``bash`` in a scratch folder that links the clone's ``.venv``; the only changes:
ports 8700 and 5555 become free ports, and ``ANDROID_ADB_SERVER_PORT`` gives the bridge a
private adb server. Every process they start is stopped afterwards.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from tests.adb_support import free_port
from tests.conftest import TIME_SCALE, require_or_skip
from tests.docs.test_recipes import _RECIPE, ROOT, run_chain

AGENT = ROOT / "docs" / "agent.md"
MCP = ROOT / "docs" / "mcp.md"
CHAIN = (("agent-stack", AGENT), ("agent-token", AGENT), ("agent-walk", AGENT),
         ("mcp-agent", MCP))


def _recipes(page: Path) -> dict[str, str]:
    return dict(_RECIPE.findall(page.read_text(encoding="utf-8")))


def test_the_pages_have_their_recipes() -> None:
    assert list(_recipes(AGENT)) == ["agent-stack", "agent-token", "agent-walk"]
    assert list(_recipes(MCP)) == ["mcp-agent"]


@pytest.mark.adb
@pytest.mark.timeout(600 * TIME_SCALE)
def test_agent_and_mcp_recipes_run_as_written(tmp_path: Path) -> None:
    for tool in ("curl", "openssl"):
        require_or_skip(shutil.which(tool) is not None, f"{tool} is not installed")
    work = tmp_path / "clone"
    work.mkdir()
    (work / ".venv").symlink_to(ROOT / ".venv")
    port, sim_port = free_port(), free_port()
    parts, _ = run_chain([(name, _recipes(page)[name]) for name, page in CHAIN], work, tmp_path,
                         port=port, sim_port=sim_port, timeout_s=540 * TIME_SCALE)
    assert list(parts) == [name for name, _ in CHAIN]
    walk = parts["agent-walk"].splitlines()
    assert walk[0].startswith("[Device State] App: "), walk
    # Another app's screen, under the agent profile: standard would refuse package_scope.
    assert walk[1] == "True com.android.settings", walk
    assert walk[2].startswith("True ") and walk[2] != "True com.android.settings", walk
    assert walk[3] == "True done", walk
    device = f"127.0.0.1:{sim_port}"
    assert re.search(rf"^{re.escape(device)} \[Device State\] App: ", parts["mcp-agent"],
                     re.MULTILINE), parts["mcp-agent"]

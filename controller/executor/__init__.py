"""The sandbox executor (docs/design.md §5): a generated test in, ground truth out.

Public surface::

    SandboxExecutor(gateway, store, settings=…, llm=…).execute(request) -> [result, …]
    ExecuteRequest          the input (``test_code``, ``project_dir``, + ours)
    RunResult               one run's result (``to_json()``: what the API and MCP answer)
    Gateway                 what the executor needs of the hub (``bridges``, ``devices``, ``call``)
    tool_schema()           the ``sandbox_executor`` tool in OpenAI function format
"""

from controller.executor.cache import ApkCache, CompiledTest, cache_key
from controller.executor.executor import ExecutorSettings, Plan, SandboxExecutor, reason_for
from controller.executor.gateway import BridgeView, DeviceView, Gateway, Target
from controller.executor.request import SKIP_MARKER, ExecuteRequest, PrebuiltApks, tool_schema
from controller.executor.results import RunResult
from controller.executor.selection import parse_selector, select_devices
from controller.executor.steps import Progress, StepLog

__all__ = [
    "SKIP_MARKER",
    "ApkCache",
    "BridgeView",
    "CompiledTest",
    "DeviceView",
    "ExecuteRequest",
    "ExecutorSettings",
    "Gateway",
    "Plan",
    "PrebuiltApks",
    "Progress",
    "RunResult",
    "SandboxExecutor",
    "StepLog",
    "Target",
    "cache_key",
    "parse_selector",
    "reason_for",
    "select_devices",
    "tool_schema",
]

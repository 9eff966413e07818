"""The sandbox executor's input (docs/design.md §5): the tool's base arguments plus ours.

``test_code`` (required) and ``project_dir`` are the base arguments (the tool schema of ``GET /v1/tools``); ``device`` (a selector or a list
of them, see :mod:`controller.executor.selection`), ``timeout_s``, ``retries`` (how many times
the failed tests alone are run again, ``-e class Cls#method``) and ``apks`` (prebuilt app and
test APKs, base64, which skip the compile) are droidwire's.
"""

from __future__ import annotations

import base64
import binascii
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_validator

__all__ = [
    "DEFAULT_TIMEOUT_S",
    "MAX_RETRIES",
    "MAX_TIMEOUT_S",
    "SKIP_MARKER",
    "ExecuteRequest",
    "PrebuiltApks",
    "tool_schema",
]

DEFAULT_TIMEOUT_S = 600.0
MAX_TIMEOUT_S = 3600.0
MAX_RETRIES = 3
MAX_SHARDS = 32
MAX_TEST_CHARS = 1 << 20
MAX_APK_B64_CHARS = 200 * 1024 * 1024
# What a test generator writes when it could not produce a test (docs/design.md §5: skipped).
SKIP_MARKER = "Could not generate test body"

_Selector = Annotated[str, StringConstraints(min_length=1, max_length=200)]


class PrebuiltApks(BaseModel):
    """An app APK and its test APK, base64-encoded."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    app: Annotated[str, StringConstraints(min_length=1, max_length=MAX_APK_B64_CHARS)]
    test: Annotated[str, StringConstraints(min_length=1, max_length=MAX_APK_B64_CHARS)]

    @field_validator("app", "test")
    @classmethod
    def _base64(cls, value: str) -> str:
        try:
            base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise ValueError("not base64") from exc
        return value

    def decoded(self) -> tuple[bytes, bytes]:
        return base64.b64decode(self.app), base64.b64decode(self.test)


class ExecuteRequest(BaseModel):
    """``POST /v1/sandbox/execute`` body and the ``sandbox_executor`` tool's arguments."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    test_code: Annotated[str, StringConstraints(min_length=1, max_length=MAX_TEST_CHARS)]
    project_dir: Annotated[str, StringConstraints(min_length=1, max_length=256)] | None = None
    device: _Selector | list[_Selector] | None = Field(default=None)
    timeout_s: Annotated[float, Field(gt=0, le=MAX_TIMEOUT_S)] | None = None
    retries: Annotated[int, Field(ge=0, le=MAX_RETRIES)] | None = None
    apks: PrebuiltApks | None = None
    # Split the suite's test classes (or methods) over this many matching devices
    # (controller.executor.sharding); REST, MCP and CLI.
    shard: Annotated[int, Field(ge=1, le=MAX_SHARDS, strict=True)] | None = None

    @field_validator("device", mode="before")
    @classmethod
    def _count(cls, value: Any) -> Any:
        # Agents send a count as a number ("device": 2): a selector all the same.
        return str(value) if isinstance(value, int) and not isinstance(value, bool) else value

    @field_validator("device")
    @classmethod
    def _selectors(cls, value: str | list[str] | None) -> str | list[str] | None:
        if isinstance(value, list) and len(value) > 32:
            raise ValueError("at most 32 device selectors")
        return value

    @property
    def selectors(self) -> list[str]:
        if self.device is None:
            return []
        return [self.device] if isinstance(self.device, str) else list(self.device)

    @property
    def skipped(self) -> bool:
        return SKIP_MARKER in self.test_code

    def for_record(self) -> dict[str, Any]:
        """What the run row keeps of the request (never the APK bytes)."""
        out = self.model_dump(exclude={"apks"}, exclude_none=True)
        if self.apks is not None:
            out["apks"] = "prebuilt"
        return out


def tool_schema() -> dict[str, Any]:
    """The ``sandbox_executor`` tool in OpenAI function-calling format (``GET /v1/tools``)."""
    return {
        "type": "function",
        "function": {
            "name": "sandbox_executor",
            "description": (
                "Compile a Kotlin instrumented Android test (fixing compile errors, at most 3 "
                "rounds), run it on a real or simulated device, and report whether the main "
                "thread really blocked: StrictMode violations, blocking time from "
                "'DroidUnblocker: elapsed=Xms', ANRs. verification_status is CONFIRMED, "
                "PARTIAL, REFUTED or PENDING (no evidence; reason_code says why)."
            ),
            "parameters": {
                "type": "object",
                "properties": {
                    "test_code": {
                        "type": "string",
                        "description": "A Kotlin instrumented test (a draft that may not compile).",
                    },
                    "project_dir": {
                        "type": "string",
                        "description": "The project a build bridge serves (default: its default "
                        "project, the demo app when none is configured).",
                    },
                    "device": {
                        "type": "string",
                        "description": "Device selector: an id (serial or BRIDGE~SERIAL), 'all', "
                        "a count, or a property test like 'sdk>=30'. Default: one device.",
                    },
                    "timeout_s": {
                        "type": "number",
                        "description": f"Deadline of the whole run in seconds (default "
                        f"{DEFAULT_TIMEOUT_S:g}, at most {MAX_TIMEOUT_S:g}).",
                    },
                },
                "required": ["test_code"],
                "additionalProperties": False,
            },
        },
    }

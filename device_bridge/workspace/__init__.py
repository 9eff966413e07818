"""The bridge's Gradle workspaces: configured projects, working copies, the test file.

Public API::

    registry = ProjectRegistry.from_config({"shop": "/srv/android/shop"}, roots=["/srv/android"])
    manager = WorkspaceManager(registry, state_dir=Path("/var/lib/droidwire/workspaces"))
    async with manager.lease("shop", test_code) as lease:
        ...  # build in lease.project_dir; lease.test_class, lease.branch
    await manager.stop()  # snapshots

Errors are ``protocol.errors.RpcError`` with docs/design.md §3 codes: ``forbidden`` for anything
that would write outside the androidTest sources or serve a path outside the roots,
``bad_request`` for malformed test code, ``conflict`` when the test would overwrite a project
file, ``busy`` when every slot is taken, ``unavailable`` for disk errors (ENOSPC …).
"""

from __future__ import annotations

from .fsutil import atomic_write
from .manager import (
    DEFAULT_SLOTS_PER_PROJECT,
    Lease,
    StartBranch,
    WorkspaceManager,
    default_state_dir,
    source_fingerprint,
)
from .placement import TestPlacement, place_test, read_namespace
from .projects import DEMO_PROJECT, Project, ProjectRegistry, demo_template_dir

__all__ = [
    "DEFAULT_SLOTS_PER_PROJECT",
    "DEMO_PROJECT",
    "Lease",
    "Project",
    "ProjectRegistry",
    "StartBranch",
    "TestPlacement",
    "WorkspaceManager",
    "atomic_write",
    "default_state_dir",
    "demo_template_dir",
    "place_test",
    "read_namespace",
    "source_fingerprint",
]

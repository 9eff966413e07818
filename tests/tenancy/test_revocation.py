"""Item 4 of the hostile-tenant suite: revocation stops work.

Every device step of a run re-authorizes when it runs; revoking a token or a loan (or its
expiry) cancels that principal's queued runs, stops the running one at once (PENDING
``access_revoked``) and ends their live streams — REST and the dashboard's tail — for
owners and admins too. The streams' periodic re-check is set to an hour here, so only the
revocation itself can end them in time."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.adb_support import AdbServer
from tests.controller.test_hub_support import fast_settings
from tests.tenancy.revocation import queued_runs_stop, stream_stops
from tests.tenancy.support import tenancy_stack

pytestmark = pytest.mark.adb

NO_PERIODIC_RECHECK = fast_settings(stream_reauth_s=3600.0)


async def test_revoking_a_loan_stops_the_borrowers_queued_and_running_runs(
    tmp_path: Path, adb_server: AdbServer
) -> None:
    async with tenancy_stack(tmp_path, adb_server, settings=NO_PERIODIC_RECHECK,
                             bridges=("alice", "bob")) as stack:
        stopped = await queued_runs_stop(stack, runs=5)
        # Nothing was installed or run on alice's phone after the loan ended (before: 32 of
        # 40 queued runs still installed and ran), and every run says why it stopped.
        assert stopped.after == 0
        assert set(stopped.reasons) == {"access_revoked"}, stopped.reasons


@pytest.mark.parametrize("how", ["grant", "expiry", "owner_token", "admin_token", "dashboard"])
async def test_revocation_ends_live_streams(
    tmp_path: Path, adb_server: AdbServer, how: str
) -> None:
    async with tenancy_stack(tmp_path, adb_server, settings=NO_PERIODIC_RECHECK,
                             bridges=("alice", "bob")) as stack:
        stopped = await stream_stops(stack, how)
        assert stopped.reasons[0].startswith("forbidden: "), stopped.reasons

"""Tokens, principals, the bootstrap admin, and the one authorization check."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator
from datetime import datetime

import pytest
from sqlalchemy import select, text

from controller.auth import (
    TOKEN_PREFIXES,
    Action,
    DeviceRef,
    Principal,
    Unauthenticated,
    authenticate,
    authorize,
    create_token,
    ensure_bootstrap_admin,
    generate_token,
    hash_token,
    parse_bearer,
    revoke_token,
)
from controller.store import Store, Token, TokenKind
from protocol.errors import ErrorCode, RpcError

BOOTSTRAP = "bootstrap-secret-0123456789"


@pytest.fixture
async def store(sqlite_url: str) -> AsyncIterator[Store]:
    async with Store(sqlite_url) as store:
        await store.migrate()
        await ensure_bootstrap_admin(store, BOOTSTRAP)
        yield store


async def admin(store: Store) -> Principal:
    return await authenticate(store, f"Bearer {BOOTSTRAP}")


@pytest.mark.parametrize("kind", list(TokenKind))
def test_tokens_carry_their_kind_and_256_random_bits(kind: TokenKind) -> None:
    tokens = {generate_token(kind) for _ in range(50)}
    assert len(tokens) == 50
    for token in tokens:
        prefix, body = token[:5], token[5:]
        assert prefix == TOKEN_PREFIXES[kind]
        assert len(body) >= 43  # 32 bytes in URL-safe base64


def test_hash_is_sha256_hex() -> None:
    assert hash_token("dw_u_x") == hashlib.sha256(b"dw_u_x").hexdigest()


@pytest.mark.parametrize(
    "header",
    [
        None,
        "",
        "Bearer",
        "Bearer ",
        "Basic dXNlcjpwYXNz",
        "Token abc",
        "Bearer a\x00b",
        "Bearer " + "a" * 300,
        "Bearer tökén",
    ],
)
def test_malformed_headers_are_unauthenticated(header: str | None) -> None:
    with pytest.raises(Unauthenticated):
        parse_bearer(header)


def test_bearer_scheme_is_case_insensitive() -> None:
    assert parse_bearer("bearer abc") == "abc"
    assert parse_bearer("  Bearer   abc  ") == "abc"


async def test_bootstrap_token_authenticates_as_admin(store: Store) -> None:
    principal = await admin(store)
    assert principal.is_admin and principal.kind is TokenKind.ADMIN
    assert principal.user_name == "admin" and principal.actor == "admin"


async def test_unknown_token_is_unauthenticated(store: Store) -> None:
    with pytest.raises(Unauthenticated):
        await authenticate(store, "Bearer " + generate_token(TokenKind.USER))


async def test_bootstrap_is_idempotent_and_a_new_one_replaces_the_old(store: Store) -> None:
    await ensure_bootstrap_admin(store, BOOTSTRAP)
    await asyncio.gather(*(ensure_bootstrap_admin(store, BOOTSTRAP) for _ in range(3)))
    async with store.session() as session:
        active = (
            (await session.execute(select(Token).where(Token.revoked_at.is_(None)))).scalars().all()
        )
    assert len(active) == 1

    await ensure_bootstrap_admin(store, "another-bootstrap-secret-42")
    with pytest.raises(Unauthenticated):
        await authenticate(store, f"Bearer {BOOTSTRAP}")
    assert (await authenticate(store, "Bearer another-bootstrap-secret-42")).is_admin

    # Configured again after being replaced (or revoked through the API): it works again.
    await ensure_bootstrap_admin(store, BOOTSTRAP)
    assert (await admin(store)).is_admin
    with pytest.raises(Unauthenticated):
        await authenticate(store, "Bearer another-bootstrap-secret-42")


async def test_only_hashes_are_stored(store: Store) -> None:
    issued = [
        await create_token(store, await admin(store), TokenKind.USER, "alice"),
        await create_token(store, await admin(store), TokenKind.BRIDGE, "pi-1"),
    ]
    async with store.engine.connect() as conn:
        rows = (await conn.execute(text("SELECT * FROM tokens"))).all()
    dump = repr(rows)
    for token in issued:
        assert token.secret not in dump
        assert hash_token(token.secret) in dump
        assert token.secret not in repr(token)
    assert BOOTSTRAP not in dump and hash_token(BOOTSTRAP) in dump


async def test_revoked_tokens_stop_working_at_once(store: Store) -> None:
    issued = await create_token(store, await admin(store), TokenKind.USER, "alice")
    alice = await authenticate(store, f"Bearer {issued.secret}")
    assert (alice.kind, alice.user_name, alice.is_admin) == (TokenKind.USER, "alice", False)
    await revoke_token(store, alice, issued.id)
    with pytest.raises(Unauthenticated):
        await authenticate(store, f"Bearer {issued.secret}")


async def last_used(store: Store, token_id: str) -> datetime | None:
    async with store.session() as session:
        token = await session.get(Token, token_id)
    assert token is not None
    return token.last_used_at


async def test_authenticate_records_last_use_behind_the_request(store: Store) -> None:
    issued = await create_token(store, await admin(store), TokenKind.USER, "alice")
    await authenticate(store, f"Bearer {issued.secret}")
    # Noted, not written: authentication itself never writes to the store.
    assert await last_used(store, issued.id) is None
    assert store.seen.pending >= 1
    await store.seen.flush()
    assert await last_used(store, issued.id) is not None


async def test_last_use_is_written_when_the_store_closes(sqlite_url: str) -> None:
    async with Store(sqlite_url) as store:
        await store.migrate()
        await ensure_bootstrap_admin(store, BOOTSTRAP)
        issued = await create_token(store, await admin(store), TokenKind.USER, "alice")
        await authenticate(store, f"Bearer {issued.secret}")
    async with Store(sqlite_url) as reopened:
        assert await last_used(reopened, issued.id) is not None


async def test_a_revoked_token_is_refused_right_after_it_was_used(store: Store) -> None:
    issued = await create_token(store, await admin(store), TokenKind.BRIDGE, "pi-1")
    assert (await authenticate(store, f"Bearer {issued.secret}")).token_id == issued.id
    await revoke_token(store, await admin(store), issued.id)
    with pytest.raises(Unauthenticated):
        await authenticate(store, f"Bearer {issued.secret}")
    await store.seen.flush()  # the pending last-use write does not bring it back
    with pytest.raises(Unauthenticated):
        await authenticate(store, f"Bearer {issued.secret}")


async def test_users_only_issue_tokens_for_themselves(store: Store) -> None:
    issued = await create_token(store, await admin(store), TokenKind.USER, "alice")
    alice = await authenticate(store, f"Bearer {issued.secret}")
    again = await create_token(store, alice, TokenKind.USER, "alice")
    assert (await authenticate(store, f"Bearer {again.secret}")).user_id == alice.user_id
    for name in ("bob", "admin"):
        with pytest.raises(RpcError) as info:
            await create_token(store, alice, TokenKind.USER, name)
        assert info.value.code is ErrorCode.FORBIDDEN


async def test_bridge_names_belong_to_their_owner(store: Store) -> None:
    root = await admin(store)
    alice = await authenticate(
        store, "Bearer " + (await create_token(store, root, TokenKind.USER, "alice")).secret
    )
    bob = await authenticate(
        store, "Bearer " + (await create_token(store, root, TokenKind.USER, "bob")).secret
    )
    first = await create_token(store, alice, TokenKind.BRIDGE, "desk")
    rotated = await create_token(store, alice, TokenKind.BRIDGE, "desk")
    a = await authenticate(store, f"Bearer {first.secret}")
    b = await authenticate(store, f"Bearer {rotated.secret}")
    assert a.kind is TokenKind.BRIDGE and a.bridge_id == b.bridge_id and a.user_id == alice.user_id
    assert a.actor == "bridge:desk"
    with pytest.raises(RpcError) as info:
        await create_token(store, bob, TokenKind.BRIDGE, "desk")
    assert info.value.code is ErrorCode.CONFLICT


@pytest.mark.parametrize("name", ["", "a~b", "a b", "-lead", "x" * 65, "a/b", "ünï"])
async def test_bad_names_are_refused(store: Store, name: str) -> None:
    with pytest.raises(RpcError) as info:
        await create_token(store, await admin(store), TokenKind.USER, name)
    assert info.value.code is ErrorCode.BAD_REQUEST


async def test_admin_kind_cannot_be_issued(store: Store) -> None:
    with pytest.raises(RpcError) as info:
        await create_token(store, await admin(store), TokenKind.ADMIN, "root2")
    assert info.value.code is ErrorCode.BAD_REQUEST


def _principal(
    user_id: str, *, kind: TokenKind = TokenKind.USER, is_admin: bool = False
) -> Principal:
    return Principal(
        token_id="t-" + user_id,
        kind=kind,
        name=user_id,
        user_id=user_id,
        user_name=user_id,
        is_admin=is_admin,
    )


@pytest.mark.parametrize("action", list(Action))
async def test_authorize_matrix(store: Store, action: Action) -> None:
    device = DeviceRef(bridge_id="b1", serial="emulator-5554", owner_id="owner")
    await authorize(_principal("root", is_admin=True), device, action, store=store)
    await authorize(_principal("owner"), device, action, store=store)

    with pytest.raises(RpcError) as info:
        await authorize(_principal("stranger"), device, action, store=store)
    assert info.value.code is ErrorCode.NOT_FOUND  # existence not disclosed

    # A bridge token acts for nobody, even the owner's own bridge token.
    with pytest.raises(RpcError) as info:
        await authorize(_principal("owner", kind=TokenKind.BRIDGE), device, action, store=store)
    assert info.value.code is ErrorCode.FORBIDDEN


async def test_a_bridges_devices_belong_to_its_owner(store: Store) -> None:
    root = await admin(store)
    alice_token = await create_token(store, root, TokenKind.USER, "alice")
    alice = await authenticate(store, f"Bearer {alice_token.secret}")
    desk = await create_token(store, alice, TokenKind.BRIDGE, "desk")
    bridge = await authenticate(store, f"Bearer {desk.secret}")
    device = DeviceRef.on_bridge(bridge, "emulator-5554")
    assert str(device) == "desk~emulator-5554"
    await authorize(alice, device, Action.USE, store=store)
    bob = await create_token(store, root, TokenKind.USER, "bob")
    with pytest.raises(RpcError):
        await authorize(
            await authenticate(store, f"Bearer {bob.secret}"), device, Action.VIEW, store=store
        )
    with pytest.raises(ValueError):
        DeviceRef.on_bridge(alice, "emulator-5554")


async def test_a_disabled_users_work_no_longer_passes_its_re_check(store: Store) -> None:
    """Work that outlasts its call (runs, streams) is re-checked by
    :func:`controller.access.check_access`; a disabled user's token fails it as a revoked one
    does, so their runs and streams end (docs/security.md), and enabled again it passes."""
    from controller.access import check_access
    from controller.store import User, utcnow

    issued = await create_token(store, await admin(store), TokenKind.USER, "dora")
    dora = await authenticate(store, f"Bearer {issued.secret}")
    await check_access(store, dora)  # live
    async with store.session() as session, session.begin():
        user = (await session.execute(select(User).where(User.name == "dora"))).scalar_one()
        user.disabled_at = utcnow()
    with pytest.raises(RpcError) as refused:
        await check_access(store, dora)
    assert refused.value.code is ErrorCode.FORBIDDEN
    assert (refused.value.data or {})["rule"] == "access_revoked"
    async with store.session() as session, session.begin():
        user = (await session.execute(select(User).where(User.name == "dora"))).scalar_one()
        user.disabled_at = None
    await check_access(store, dora)


async def test_handshakes_at_once_share_one_token_read_and_revocations_still_count(
    store: Store,
) -> None:
    """A reconnect storm: authentications waiting at the same moment are answered by one
    read (controller.store.batched), each with its own principal; an unknown or revoked
    token among them is refused, and a token revoked before its authentication began is
    refused even while a read is under way."""
    from controller.auth.tokens import _TOKEN_READS

    boss = await admin(store)
    issued = [await create_token(store, boss, TokenKind.BRIDGE, f"pi-{i}") for i in range(20)]
    await revoke_token(store, boss, issued[5].id)
    headers = [f"Bearer {t.secret}" for t in issued] + [f"Bearer {generate_token(TokenKind.BRIDGE)}"]
    reads = _TOKEN_READS.of(store)
    before = reads.fetches
    outcomes = await asyncio.gather(*(authenticate(store, h) for h in headers),
                                    return_exceptions=True)
    assert reads.fetches - before == 1
    for i, outcome in enumerate(outcomes[:20]):
        if i == 5:
            assert isinstance(outcome, Unauthenticated)
        else:
            assert isinstance(outcome, Principal) and outcome.token_id == issued[i].id
    assert isinstance(outcomes[20], Unauthenticated)

    # One read under way; a token revoked now, then authenticated: refused.
    slow = asyncio.ensure_future(authenticate(store, headers[0]))
    await asyncio.sleep(0)
    await revoke_token(store, boss, issued[1].id)
    with pytest.raises(Unauthenticated):
        await authenticate(store, headers[1])
    assert (await slow).token_id == issued[0].id

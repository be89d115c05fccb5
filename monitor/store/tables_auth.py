"""The API keys table (:mod:`monitor.auth`), on the shared metadata.

``api_keys``
    One row per issued key: its public ``id`` (shown by ``monitor keys list``), a ``name``, the
    SHA-256 of its secret (``key_hash``; the secret itself is never stored), the agents it may
    act for (``agents``: exact ids, ``prefix*`` patterns for a team, or ``*``), its ``scopes``
    (``write``, ``gate``, ``read``), when it was created, when it expires (NULL: never) and
    when it was revoked (NULL: active). Rows are never deleted, so a revocation stays visible.
"""

from __future__ import annotations

from sqlalchemy import Column, Table, Text, func
from sqlalchemy.dialects.postgresql import ARRAY

from monitor.store.tables import TS, metadata

api_keys = Table(
    "api_keys",
    metadata,
    Column("id", Text, primary_key=True),
    Column("name", Text, nullable=False, server_default=""),
    Column("key_hash", Text, nullable=False, unique=True),
    Column("agents", ARRAY(Text), nullable=False),
    Column("scopes", ARRAY(Text), nullable=False),
    Column("created_at", TS, nullable=False, server_default=func.now()),
    Column("expires_at", TS),
    Column("revoked_at", TS),
)

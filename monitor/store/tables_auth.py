"""The API keys table (:mod:`monitor.auth`), on the shared metadata.

``api_keys``
    One row per issued key: its public ``id`` (shown by ``monitor keys list``), a ``name``, the
    SHA-256 of its secret (``key_hash``; the secret itself is never stored), the agents it may
    act for (``agents``: exact ids, ``prefix*`` patterns for a team, or ``*``), its ``scopes``
    (``write``, ``gate``, ``read``), when it was created, when it expires (NULL: never) and
    when it was revoked (NULL: active). Rows are never deleted, so a revocation stays visible.
"""

from __future__ import annotations

from sqlalchemy import Column, Table, Text
from sqlalchemy.dialects.postgresql import ARRAY

from monitor.store.tables import TS, inserted_at, key, metadata, required

api_keys = Table(
    "api_keys",
    metadata,
    key("id", Text),
    required("name", Text, server_default=""),
    required("key_hash", Text, unique=True),
    required("agents", ARRAY(Text)),
    required("scopes", ARRAY(Text)),
    inserted_at("created_at"),
    Column("expires_at", TS),
    Column("revoked_at", TS),
)

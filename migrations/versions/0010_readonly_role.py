"""A read-only role for dashboards: monitor_readonly gets SELECT on every table and view

Grafana (docker-compose.yml) logs in as ``monitor_grafana``, a member of this group role
(created with its password by deploy/postgres-init on the first start of the Postgres volume),
so the dashboards can read everything and change nothing. Tables and views that later
migrations create are covered by default privileges of the migrating role.

Roles belong to the whole server: the role is created only if missing (several databases of
one server may share it), and the downgrade removes its privileges in this database and drops
it only when no other database still grants it anything.

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-23 18:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ROLE = "monitor_readonly"


def upgrade() -> None:
    op.execute(
        f"""
        DO $$
        BEGIN
          IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '{ROLE}') THEN
            CREATE ROLE {ROLE} NOLOGIN;
          END IF;
        EXCEPTION WHEN duplicate_object OR unique_violation THEN
          NULL;  -- created at the same moment by a migration of another database
        END
        $$
        """
    )
    op.execute(f"GRANT USAGE ON SCHEMA public TO {ROLE}")
    op.execute(f"GRANT SELECT ON ALL TABLES IN SCHEMA public TO {ROLE}")
    op.execute(f"ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT SELECT ON TABLES TO {ROLE}")


def downgrade() -> None:
    op.execute(f"ALTER DEFAULT PRIVILEGES IN SCHEMA public REVOKE SELECT ON TABLES FROM {ROLE}")
    op.execute(f"REVOKE SELECT ON ALL TABLES IN SCHEMA public FROM {ROLE}")
    op.execute(f"REVOKE USAGE ON SCHEMA public FROM {ROLE}")
    op.execute(
        f"""
        DO $$
        BEGIN
          DROP ROLE IF EXISTS {ROLE};
        EXCEPTION WHEN dependent_objects_still_exist OR dependent_privilege_descriptors_still_exist THEN
          NULL;  -- another database of this server still grants it privileges
        END
        $$
        """
    )

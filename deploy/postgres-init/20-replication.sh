#!/bin/sh
# Run once by the postgres image on an empty data volume (docker-entrypoint-initdb.d).
# Lets the `monitor` role stream WAL to a replica over the compose network (password auth):
# the `postgres-replica` service (profile `replica`) clones the server with pg_basebackup and
# follows it. wal_level (replica) and max_wal_senders (10) are Postgres's defaults already.
set -eu
echo "host replication $POSTGRES_USER all scram-sha-256" >> "$PGDATA/pg_hba.conf"

#!/bin/sh
# Run once by the postgres image on an empty data volume (docker-entrypoint-initdb.d).
# Creates Grafana's login role `monitor_grafana` (password: GRAFANA_DB_PASSWORD) as a member of
# `monitor_readonly`, the read-only group role that migration 0010 grants SELECT on every table
# and view of the monitor's schema. Grafana can then read the dashboards' data and change nothing.
#
# JIT is off for that role: every dashboard query reads roll-ups and runs in milliseconds, but
# on a large store the planner's cost estimates cross jit_above_cost and each execution pays a
# compilation (a 0.1 ms query took 3.4 ms, 27 ms the first time, on a 10M-item store;
# docs/scaling.md "JIT on dashboard queries").
#
# An existing volume (created before this script) needs the same statements run once by hand:
#   docker compose exec postgres psql -U monitor -d monitor \
#     -c "CREATE ROLE monitor_grafana LOGIN PASSWORD '...' IN ROLE monitor_readonly" \
#     -c "ALTER ROLE monitor_grafana SET jit = off"
set -eu
: "${GRAFANA_DB_PASSWORD:?GRAFANA_DB_PASSWORD is required}"
psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname "$POSTGRES_DB" \
  -v pw="$GRAFANA_DB_PASSWORD" <<'SQL'
CREATE ROLE monitor_readonly NOLOGIN;
CREATE ROLE monitor_grafana LOGIN PASSWORD :'pw' IN ROLE monitor_readonly;
ALTER ROLE monitor_grafana SET jit = off;
SQL

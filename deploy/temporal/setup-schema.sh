#!/bin/sh
# Creates, or brings up to date, the Temporal server's two PostgreSQL databases: persistence
# (TEMPORAL_DB_NAME, default temporal) and visibility (TEMPORAL_VISIBILITY_DB_NAME, default
# temporal_visibility), with the server's own schema tool. Every step is safe to run again: a
# database that exists is kept, a schema already at the latest version is left as it is.
# `make run-cluster`, the cluster tests and docker-compose.yml (in the admin-tools image) all
# run this script.
#
#   SQL_TOOL    the schema tool (temporal-sql-tool; `make` builds it as bin/temporal-server/sql)
#   SCHEMA_DIR  the server's schema/postgresql/v12 directory
#   TEMPORAL_DB_HOST, TEMPORAL_DB_PORT, TEMPORAL_DB_USER, TEMPORAL_DB_PASSWORD: as in cluster.yaml
set -eu
: "${SQL_TOOL:=temporal-sql-tool}"
: "${SCHEMA_DIR:=/etc/temporal/schema/postgresql/v12}"
export SQL_PLUGIN=postgres12
export SQL_HOST="${TEMPORAL_DB_HOST:-127.0.0.1}"
export SQL_PORT="${TEMPORAL_DB_PORT:-5432}"
export SQL_USER="${TEMPORAL_DB_USER:-postgres}"
export SQL_PASSWORD="${TEMPORAL_DB_PASSWORD:-}"

run() { # the tool's log is shown only when it fails
  out=$("$SQL_TOOL" "$@" 2>&1) || { echo "$out"; echo "failed: $SQL_TOOL $*"; exit 1; }
}
setup() { # database name, schema (temporal or visibility)
  echo "    database $1: schema $2"
  run --db "$1" create-database
  run --db "$1" setup-schema -v 0.0
  run --db "$1" update-schema -d "$SCHEMA_DIR/$2/versioned"
}
setup "${TEMPORAL_DB_NAME:-temporal}" temporal
setup "${TEMPORAL_VISIBILITY_DB_NAME:-temporal_visibility}" visibility

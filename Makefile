# The two commands a newcomer needs: `make run` and `make test`.
TEMPORAL_VERSION := v1.5.1
# The Temporal server and Web UI the CLI above embeds (its go.mod), for `make run-cluster`.
TEMPORAL_SERVER_VERSION := v1.29.1
TEMPORAL_UI_VERSION := v2.42.1
GO ?= go
export PATH := $(CURDIR)/bin:$(PATH)

.PHONY: run run-cluster test test-unit test-faults test-cluster bench build lint fuzz compose-check chaos clean

run: bin/temporal
	@$(GO) run ./cmd/devstack

# The production topology on this machine: a Temporal cluster on PostgreSQL, two APIs, two
# workers, the bank simulator (cmd/devstack, docs/cluster.md).
run-cluster: bin/temporal bin/temporal-server/server bin/temporal-ui/server
	@$(GO) run ./cmd/devstack --cluster

build: bin/payments

bin/payments: $(shell find . -name '*.go' -not -path './.data/*') go.mod go.sum openapi.yaml
	@$(GO) build -o bin/payments ./cmd/payments

# The pinned Temporal CLI (dev server + Web UI), built from the Go module proxy once.
bin/temporal:
	@echo "==> Building the Temporal CLI $(TEMPORAL_VERSION) into ./bin/temporal (first time only, about 5 minutes)..."
	@GOBIN=$(CURDIR)/bin $(GO) install -v github.com/temporalio/cli/cmd/temporal@$(TEMPORAL_VERSION) 2>&1 | \
		awk '{ n++; printf "\r    compiled %d packages (%s)\033[K", n, $$0 } END { print "" }'
	@test -x bin/temporal && echo "==> Temporal CLI ready: ./bin/temporal"

# The Temporal server (its four services, the schema tool, the PostgreSQL schema), built from
# the Go module proxy once.
bin/temporal-server/server:
	@echo "==> Building the Temporal server $(TEMPORAL_SERVER_VERSION) into ./bin/temporal-server (first time only, about 5 minutes)..."
	@GOBIN=$(CURDIR)/bin/temporal-server $(GO) install -v go.temporal.io/server/cmd/server@$(TEMPORAL_SERVER_VERSION) \
		go.temporal.io/server/cmd/tools/sql@$(TEMPORAL_SERVER_VERSION) 2>&1 | \
		awk '{ n++; printf "\r    compiled %d packages (%s)\033[K", n, $$0 } END { print "" }'
	@rm -rf bin/temporal-server/schema && \
		cp -R "$$($(GO) mod download -json go.temporal.io/server@$(TEMPORAL_SERVER_VERSION) | sed -n 's/^\t"Dir": "\(.*\)",$$/\1/p')/schema/postgresql/v12" bin/temporal-server/schema && \
		chmod -R u+w bin/temporal-server/schema
	@test -x bin/temporal-server/server && test -x bin/temporal-server/sql && test -d bin/temporal-server/schema/temporal && \
		echo "==> Temporal server ready: ./bin/temporal-server"

# The Temporal Web UI server (the UI is embedded in it).
bin/temporal-ui/server:
	@echo "==> Building the Temporal UI $(TEMPORAL_UI_VERSION) into ./bin/temporal-ui (first time only, a few minutes)..."
	@GOBIN=$(CURDIR)/bin/temporal-ui $(GO) install -v github.com/temporalio/ui-server/v2/cmd/server@$(TEMPORAL_UI_VERSION) 2>&1 | \
		awk '{ n++; printf "\r    compiled %d packages (%s)\033[K", n, $$0 } END { print "" }'
	@test -x bin/temporal-ui/server && echo "==> Temporal UI ready: ./bin/temporal-ui/server"

test: lint compose-check test-unit test-faults

test-unit: bin/temporal bin/temporal-server/server
	@echo "==> Unit and integration tests (real PostgreSQL, real Temporal dev server, -race)"
	@# -p 1: each integration package runs its own dev servers, processes and load tests; one at
	@# a time, they do not compete for the CPUs (two on this machine and in CI).
	$(GO) test -race -count=1 -p 1 -timeout 30m $$($(GO) list ./... | grep -v /rig/outages)

# The slow ones: a worker killed mid-transfer, PostgreSQL cut off under load, Temporal restarted;
# and, on a Temporal cluster with the APIs and workers apart (TestCluster*), a history service
# killed, a matching service killed, a frontend restarted.
test-faults: bin/temporal bin/temporal-server/server
	@echo "==> Fault tests (processes killed, connections cut, servers restarted; about two minutes)"
	@# -timeout: a hung fault test fails with every goroutine's stack instead of holding CI for ever.
	$(GO) test -race -count=1 -timeout 30m -v ./rig/outages/

# Every suite against a Temporal cluster (four service processes on PostgreSQL) instead of the
# dev server: each test package starts a cluster of its own. Several minutes.
test-cluster: bin/temporal bin/temporal-server/server
	@echo "==> Every suite against a Temporal cluster (several minutes)"
	PAYMENTS_TEST_TEMPORAL=cluster $(GO) test -race -count=1 -p 1 -timeout 30m ./...

lint:
	@echo "==> gofmt, go vet, workflowcheck"
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo "gofmt: files above need formatting"; exit 1; }
	$(GO) vet ./...
	$(GO) run go.temporal.io/sdk/contrib/tools/workflowcheck@v0.6.0 ./workflows/...

# docker-compose.yml is checked where Debian's docker-compose is installed; no engine is needed.
compose-check:
	@if command -v docker-compose >/dev/null 2>&1; then \
		echo "==> docker-compose config"; docker-compose -f docker-compose.yml config -q; \
	else echo "==> docker-compose not installed: skipping the compose file check"; fi

# What a transfer costs, against the stack `make run` or `make run-cluster` is running (start it
# first, in another terminal). BENCH_FLAGS passes more, e.g. BENCH_FLAGS="--clients 32 --duration 5m".
# The stack must allow what the bench sends on its one key: start it with PAYMENTS_RATE_LIMIT=100000.
# The bench seals what it writes to Temporal with the stack's keys: PAYMENTS_CODEC_KEYS, or the key
# make run (or make run-cluster) generated.
bench: bin/payments
	@mkdir -p .data
	@if pgrep -xf 'bin/payments serve' >/dev/null; then \
		PAYMENTS_CODEC_KEYS="$${PAYMENTS_CODEC_KEYS:-$$(cat .data/codec-keys 2>/dev/null)}" bin/payments bench --topology serve --json .data/bench.json --watch-pid "$$(pgrep -d, -xf 'bin/payments serve')" $(BENCH_FLAGS); \
	elif pgrep -xf 'bin/payments api' >/dev/null; then \
		DATABASE_URL="$${DATABASE_URL:-postgres://postgres@localhost:5432/payments_cluster?sslmode=disable}" \
		PAYMENTS_CODEC_KEYS="$${PAYMENTS_CODEC_KEYS:-$$(cat .data/cluster/codec-keys 2>/dev/null)}" bin/payments bench --topology split --json .data/bench-cluster.json \
			--watch-pid "$$(pgrep -d, -xf 'bin/payments (api|worker)')" $(BENCH_FLAGS); \
	else echo "make bench: start 'make run' or 'make run-cluster' first (in another terminal)"; exit 1; fi

# A longer fuzzing session than the seed corpus `make test` runs: every fuzz target of the
# repository (each `func Fuzz…` of a _test.go file, found here, so that none is forgotten), one
# after the other. FuzzAPI sends what it finds through HTTP to a test environment (PostgreSQL, a
# dev server) that each fuzz worker starts: one worker is enough.
FUZZTIME ?= 30s
FUZZ_ONE_WORKER := FuzzAPI
fuzz: bin/temporal
	@set -e; for f in $$(find . -path ./.data -prune -o -path ./bin -prune -o -name '*_test.go' -print | sort); do \
		for t in $$(sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(.*/\1/p' "$$f"); do \
			p=; case " $(FUZZ_ONE_WORKER) " in *" $$t "*) p=-parallel=1;; esac; \
			echo "==> $$t ($$(dirname "$$f"))"; \
			$(GO) test -run='^$$' -fuzz="^$$t\$$" -fuzztime=$(FUZZTIME) $$p "$$(dirname "$$f")/"; \
		done; \
	done

# The full chaos runs (docs/reliability.md): OPS operations per seed, one run per seed, each on
# a PostgreSQL, a Temporal cluster and payments processes of its own, under seeded faults. `make
# test` makes a short one (chaos.TestShortChaosRun). Exit 1 when any run finds a violation.
SEEDS ?= 1,2,3
OPS ?= 10000
chaos: bin/payments bin/temporal-server/server
	@echo "==> Chaos runs: seeds $(SEEDS), $(OPS) operations each (several minutes a seed)"
	bin/payments chaos --seeds $(SEEDS) --ops $(OPS)

clean:
	rm -rf bin/payments

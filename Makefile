# The two commands a newcomer needs: `make run` and `make test`.
TEMPORAL_VERSION := v1.5.1
GO ?= go
export PATH := $(CURDIR)/bin:$(PATH)

.PHONY: run test test-unit test-faults bench build lint fuzz compose-check clean

run: bin/temporal
	@$(GO) run ./cmd/devstack

build: bin/payments

bin/payments: $(shell find . -name '*.go' -not -path './.data/*') go.mod go.sum openapi.yaml
	@$(GO) build -o bin/payments ./cmd/payments

# The pinned Temporal CLI (dev server + Web UI), built from the Go module proxy once.
bin/temporal:
	@echo "==> Building the Temporal CLI $(TEMPORAL_VERSION) into ./bin/temporal (first time only, about 5 minutes)..."
	@GOBIN=$(CURDIR)/bin $(GO) install -v github.com/temporalio/cli/cmd/temporal@$(TEMPORAL_VERSION) 2>&1 | \
		awk '{ n++; printf "\r    compiled %d packages (%s)\033[K", n, $$0 } END { print "" }'
	@test -x bin/temporal && echo "==> Temporal CLI ready: ./bin/temporal"

test: lint compose-check test-unit test-faults

test-unit: bin/temporal
	@echo "==> Unit and integration tests (real PostgreSQL, real Temporal dev server, -race)"
	@# -p 1: each integration package runs its own dev servers, processes and load tests; one at
	@# a time, they do not compete for the CPUs (two on this machine and in CI).
	$(GO) test -race -count=1 -p 1 $$($(GO) list ./... | grep -v /faults)

# The slow ones: a worker killed mid-transfer, PostgreSQL cut off under load, Temporal restarted.
test-faults: bin/temporal
	@echo "==> Fault tests (processes killed, connections cut, servers restarted; about a minute)"
	$(GO) test -race -count=1 -v ./faults/

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

# What a transfer costs, against the stack `make run` is running (start it first, in another
# terminal). BENCH_FLAGS passes more, e.g. BENCH_FLAGS="--clients 32 --duration 5m".
bench: bin/payments
	@pgrep -f 'payments serve' >/dev/null || { echo "make bench: start 'make run' first (in another terminal)"; exit 1; }
	@mkdir -p .data
	bin/payments bench --json .data/bench.json --watch-pid "$$(pgrep -d, -xf 'bin/payments serve')" $(BENCH_FLAGS)

# A longer fuzzing session than the seed corpus `make test` runs. FuzzAPI sends what it finds
# through HTTP to a test environment (PostgreSQL, a dev server) that each fuzz worker starts:
# one worker is enough.
FUZZTIME ?= 30s
fuzz: bin/temporal
	$(GO) test -run=^$$ -fuzz=FuzzParseKey -fuzztime=$(FUZZTIME) ./internal/idempotency/
	$(GO) test -run=^$$ -fuzz=FuzzCanonical -fuzztime=$(FUZZTIME) ./internal/idempotency/
	$(GO) test -run=^$$ -fuzz=FuzzBodyRoundTrip -fuzztime=$(FUZZTIME) ./internal/idempotency/
	$(GO) test -run=^$$ -fuzz=FuzzTransferDecoding -fuzztime=$(FUZZTIME) ./api/request/
	$(GO) test -run=^$$ -fuzz=FuzzAccountDecoding -fuzztime=$(FUZZTIME) ./api/request/
	$(GO) test -run=^$$ -fuzz=FuzzAPI -fuzztime=$(FUZZTIME) -parallel=1 ./api/

clean:
	rm -rf bin/payments

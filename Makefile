# breakwater — the one place the project's commands live.
GO        ?= go
PKGS      ?= ./...
FUZZTIME  ?= 10s
BENCHTIME ?= 1s

.PHONY: test fmt-check vet unit bench fuzz

## test: formatting, vet, and every test with the race detector
test: fmt-check vet unit

fmt-check:
	@out="$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))"; \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet $(PKGS)

unit:
	$(GO) test -race -count=1 $(PKGS)

## bench: the decision-path benchmarks with allocations
bench:
	$(GO) test -run '^$$' -bench . -benchmem -benchtime $(BENCHTIME) ./model/

## fuzz: a short run of every fuzz target (FUZZTIME each)
fuzz:
	@set -e; for pkg in $$($(GO) list ./...); do \
	  dir=$$($(GO) list -f '{{.Dir}}' $$pkg); \
	  for t in $$(grep -ho '^func Fuzz[A-Za-z0-9_]*' $$dir/*_test.go 2>/dev/null | sed 's/^func //'); do \
	    echo "== $$pkg $$t"; $(GO) test -run '^$$' -fuzz "^$$t$$" -fuzztime $(FUZZTIME) $$pkg; \
	  done; \
	done

# --- proxy ---
.PHONY: run bench-proxy

## run: the gateway on examples/demo.yaml (memory store, in-process demo upstreams)
run:
	$(GO) run ./cmd/breakwater serve -config examples/demo.yaml

## bench-proxy: perfkit (../shared/perfkit) against the mock directly and through the gateway
bench-proxy:
	PERFKIT=$${PERFKIT:-../shared/perfkit} ./examples/bench-proxy.sh

# --- store ---
.PHONY: test-store bench-store

## test-store: the store, migration and lease tests against Postgres (TEST_DATABASE_URL, else a local initdb cluster)
test-store:
	$(GO) test -race -count=1 ./store/ ./internal/pgtest/ ./migrations/ ./cmd/breakwater/

## bench-store: storm persistence, restore and replica convergence (docs/store.md)
bench-store:
	$(GO) test -run '^$$' -bench 'ApplyMemory' -benchmem ./store/
	$(GO) test -run '^$$' -bench 'StormPersistence' -benchtime 20000x ./store/
	$(GO) test -run '^$$' -bench 'Restore1000' -benchtime 5x ./store/
	$(GO) test -run '^$$' -bench 'ReplicaConvergence' -benchtime 30x ./store/

# --- sim ---
# The simulator, the fault catalog and the scenario library. `make test`
# already runs the library and the determinism self-check (go test ./...).
.PHONY: sim-library sim-bench sim-long sim-fuzz

## sim-library: play every library scenario through the CLI
sim-library:
	$(GO) run ./cmd/breakwater sim -q scenarios/library/*.yaml

## sim-bench: simulator throughput on one core (targets: ≥1M req/s hashed, ≥200k req/s with the JSON trace)
sim-bench:
	$(GO) test -run '^$$' -bench . -benchmem -benchtime 3x -cpu 1 ./sim/

## sim-long: 24 simulated hours of 50 req/s with faults (target ≤ 10 s)
sim-long:
	BREAKWATER_SIM_LONG=1 $(GO) test -run '^TestFaultyDay$$' -v -count=1 ./sim/

## sim-fuzz: fuzz the scenario loader and the fault rules parser
sim-fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzLoad$$' -fuzztime $(FUZZTIME) ./scenarios/

# breakwater — the one place the project's commands live.
GO        ?= go
PKGS      ?= ./...
FUZZTIME  ?= 10s
BENCHTIME ?= 1s

.PHONY: test test-long fmt-check vet unit bench bench-wire fuzz

## test: formatting, vet, and every test with the race detector
test: fmt-check vet unit

## test-long: what make test leaves out: the long conformance cases (docs/replay.md), 24 simulated hours, every library file replayed with -compare, and the chaos, soak and heap runs
test-long:
	BREAKWATER_CONFORMANCE_LONG=1 $(GO) test -race -count=1 -run '^TestConformanceSimVsGateway$$' -v ./replay/
	$(MAKE) sim-long replay-library chaos soak heap

fmt-check:
	@out="$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))"; \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet $(PKGS)

# Four test packages at a time on two cores: the long ones (proxy, replay,
# store) spend much of their time waiting on sockets, Postgres and timers,
# so the default of one per core leaves the machine half idle.
unit:
	$(GO) test -race -count=1 -p 4 $(PKGS)
	@# The race build changes allocations, so the held-stream heap pin runs
	@# in a normal build as well.
	$(GO) test -count=1 -run '^TestHeldStreamHeap$$' ./proxy/

## bench: the decision-path benchmarks with allocations
bench:
	$(GO) test -run '^$$' -bench . -benchmem -benchtime $(BENCHTIME) ./model/

## bench-wire: each client-surface translation (request, JSON answer, stream chunk) with allocations
bench-wire:
	$(GO) test -run '^$$' -bench . -benchmem ./internal/wire/

## fuzz: a short run of every fuzz target (FUZZTIME each)
fuzz:
	@set -e; for pkg in $$($(GO) list ./...); do \
	  dir=$$($(GO) list -f '{{.Dir}}' $$pkg); \
	  for t in $$(grep -ho '^func Fuzz[A-Za-z0-9_]*' $$dir/*_test.go 2>/dev/null | sed 's/^func //'); do \
	    echo "== $$pkg $$t"; $(GO) test -run '^$$' -fuzz "^$$t$$" -fuzztime $(FUZZTIME) $$pkg; \
	  done; \
	done

# --- proxy ---
.PHONY: run bench-proxy bench-instr bench-surface-instr bench-surface-ttft

## run: the gateway on examples/demo.yaml (memory store, in-process demo upstreams)
run:
	$(GO) run ./cmd/breakwater serve -config examples/demo.yaml

## bench-proxy: the perf kit (PERFKIT=<path>) against the mock directly, through the plain net/http floor (examples/bareproxy) and through the gateway, in one run
bench-proxy:
	PERFKIT="$(PERFKIT)" ./examples/bench-proxy.sh

## bench-instr: instructions per request of the gateway and the no-logic floor (callgrind, PERFKIT=<path>; repeatable on a noisy machine)
bench-instr:
	PERFKIT="$(PERFKIT)" ./examples/bench-instr.sh

## bench-surface-ttft: time to first content per client format (chat, Messages, Responses) through the gateway, interleaved rounds (perf kit streamlat, PERFKIT=<path>)
bench-surface-ttft:
	PERFKIT="$(PERFKIT)" ./examples/bench-surface-ttft.sh

## bench-surface-instr: instructions per streamed request for chat, Messages and Responses, and what the translation adds (callgrind)
bench-surface-instr:
	./examples/bench-surface-instr.sh

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
.PHONY: sim-library sim-bench sim-long sim-fuzz replay-conformance replay-library

## sim-library: play every library scenario through the CLI
sim-library:
	$(GO) run ./cmd/breakwater sim -q scenarios/library/*.yaml

## sim-bench: simulator throughput on one core (targets: ≥1M req/s hashed, ≥200k req/s with the JSON trace)
sim-bench:
	$(GO) test -run '^$$' -bench . -benchmem -benchtime 3x -cpu 1 ./sim/

## sim-long: 24 simulated hours of 50 req/s with faults (target ≤ 10 s)
sim-long:
	BREAKWATER_SIM_LONG=1 $(GO) test -run '^TestFaultyDay$$' -v -count=1 ./sim/

## replay-conformance: the sim↔gateway conformance test on every library scenario (make test leaves out the long ones; make test-long runs them)
replay-conformance:
	BREAKWATER_CONFORMANCE_LONG=1 $(GO) test -run '^TestConformanceSimVsGateway$$' -v -count=1 ./replay/

## replay-library: every library scenario against a real gateway, compared with the simulator (idle time skipped: a few minutes at REPLAY_SPEED=1)
REPLAY_SPEED ?= 1
replay-library:
	$(GO) run ./cmd/breakwater replay -q -compare -speed $(REPLAY_SPEED) scenarios/library/*.yaml

## sim-fuzz: fuzz the scenario loader and the fault rules parser
sim-fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzLoad$$' -fuzztime $(FUZZTIME) ./scenarios/

# --- chaos ---
# Chaos, soak and heap runs against a real in-process gateway with fault
# upstreams on loopback (docs/chaos.md). `make test` already runs the chaos
# package's tests: a short end-to-end chaos run, the Postgres outage,
# restart and replica runs, the invariant checkers and the schedule parser.
# Every run writes a JSON report and an HTML picture to $(CHAOS_OUT)
# (ignored by git: *.out).
CHAOS           ?= $(GO) run ./cmd/breakwater chaos
CHAOS_CONFIG    ?= examples/chaos.yaml
CHAOS_SCHEDULE  ?= examples/chaos-schedule.yaml
CHAOS_DURATION  ?= 20s
CHAOS_SEED      ?= 1
CHAOS_OUT       ?= chaos.out
CHAOS_DB        ?= postgres://postgres@127.0.0.1:5432/breakwater_chaos?sslmode=disable
SOAK_RATE       ?= 1000
SOAK_RAMP       ?= 500,1000,1500,2000,2500,3000
SOAK_DURATION   ?= 60s
SOAK_P95_MS     ?= 5
HEAP_STREAMS    ?= 500
HEAP_HOLD       ?= 4s
# The target per held stream (docs/chaos.md "Heap"): a regression guard.
HEAP_PER_STREAM_KB ?= 64

.PHONY: chaos chaos-random chaos-postgres chaos-findings soak soak-ramp heap

## chaos: a short chaos run (≤ 60 s): the example schedule, with a restart mid-incident
chaos:
	@mkdir -p $(CHAOS_OUT)
	$(CHAOS) -config $(CHAOS_CONFIG) -schedule $(CHAOS_SCHEDULE) -duration $(CHAOS_DURATION) \
	  -json $(CHAOS_OUT)/chaos.json -report $(CHAOS_OUT)/chaos.html

## chaos-random: a seeded random mix of faults (CHAOS_SEED, CHAOS_DURATION)
chaos-random:
	@mkdir -p $(CHAOS_OUT)
	$(CHAOS) -config $(CHAOS_CONFIG) -seed $(CHAOS_SEED) -duration $(CHAOS_DURATION) \
	  -json $(CHAOS_OUT)/chaos-random-$(CHAOS_SEED).json -report $(CHAOS_OUT)/chaos-random-$(CHAOS_SEED).html

## chaos-postgres: Postgres unreachable mid-incident, then a restart on the same database
## (CHAOS_DB, default breakwater_chaos on 127.0.0.1, created when missing)
chaos-postgres:
	@mkdir -p $(CHAOS_OUT)
	@db=$$(echo '$(CHAOS_DB)' | sed -E 's#^[^/]*//[^/]*/([^?]*).*#\1#'); \
	  admin=$$(echo '$(CHAOS_DB)' | sed -E 's#^([^/]*//[^/]*/)[^?]*#\1postgres#'); \
	  if command -v psql >/dev/null && [ -n "$$db" ] && \
	     [ "$$(psql "$$admin" -Atqc "SELECT 1 FROM pg_database WHERE datname = '$$db'" 2>/dev/null)" != 1 ]; then \
	    psql "$$admin" -qc "CREATE DATABASE \"$$db\"" || true; \
	  fi
	BREAKWATER_CHAOS_DB='$(CHAOS_DB)' $(CHAOS) -config examples/chaos-postgres.yaml -schedule examples/chaos-postgres-schedule.yaml \
	  -json $(CHAOS_OUT)/chaos-postgres.json -report $(CHAOS_OUT)/chaos-postgres.html

## chaos-findings: the gateway gaps the checks once found (docs/chaos.md "Findings"), all fixed: a regression run
chaos-findings:
	@mkdir -p $(CHAOS_OUT)
	$(CHAOS) -config $(CHAOS_CONFIG) -schedule examples/chaos-findings.yaml \
	  -json $(CHAOS_OUT)/chaos-findings.json -report $(CHAOS_OUT)/chaos-findings.html

## soak: a fixed rate (SOAK_RATE req/s) for SOAK_DURATION: p95 added latency ≤ SOAK_P95_MS, errors ≤ 0.1 %, flat memory
soak:
	@mkdir -p $(CHAOS_OUT)
	$(CHAOS) -mode soak -config $(CHAOS_CONFIG) -rate $(SOAK_RATE) -duration $(SOAK_DURATION) -p95-added-ms $(SOAK_P95_MS) \
	  -json $(CHAOS_OUT)/soak.json -report $(CHAOS_OUT)/soak.html

## soak-ramp: the highest rate sustained at p95 added latency ≤ SOAK_P95_MS (SOAK_RAMP, 10 s per step)
soak-ramp:
	@mkdir -p $(CHAOS_OUT)
	$(CHAOS) -mode soak -config $(CHAOS_CONFIG) -rate $(SOAK_RAMP) -duration 10s -p95-added-ms $(SOAK_P95_MS) \
	  -json $(CHAOS_OUT)/soak-ramp.json

## heap: HEAP_STREAMS concurrent SSE streams held HEAP_HOLD (< the config's attemptMs); heap per stream ≤ HEAP_PER_STREAM_KB, back to baseline
heap:
	@mkdir -p $(CHAOS_OUT)
	$(CHAOS) -mode heap -config $(CHAOS_CONFIG) -streams $(HEAP_STREAMS) -stream-hold $(HEAP_HOLD) \
	  -heap-per-stream-kb $(HEAP_PER_STREAM_KB) -json $(CHAOS_OUT)/heap.json

# --- packaging ---
.PHONY: build docker

VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT  ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)

## build: a static binary at bin/breakwater stamped with VERSION and COMMIT
build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "-s -w -X main.version=$(VERSION) -X main.commit=$(COMMIT)" -o bin/breakwater ./cmd/breakwater

## docker: the container image breakwater:$(VERSION) (Dockerfile)
docker:
	docker build --build-arg VERSION=$(VERSION) --build-arg COMMIT=$(COMMIT) -t breakwater:$(VERSION) .

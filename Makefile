# stockade — see README.md. Every target works on a fresh machine after
# .ci/run's package install (Go 1.26, curl, dig).
GO        ?= go
BIN       := bin/stockade
PKGS      := ./...
GOFLAGS   ?=
export GOFLAGS

.PHONY: all build run run-cluster run-boundary test test-race vet fmt-check repo-check bench bench-soak bench-cluster fuzz chaos chaos-cluster clean generate

all: build

build:
	$(GO) build -o $(BIN) ./cmd/stockade

# The main job on the embedded default: a gateway with one sample sandbox (an
# example policy; the workload calls a local offline upstream through its
# proxy every few seconds) and what to try next. Addresses from the
# environment: STOCKADE_LISTEN (API, default 127.0.0.1:7420; the SSH relay
# takes a free port on its host), STOCKADE_UPSTREAM_PORT (default 18080).
# Ctrl-C removes everything it made. `make run-boundary`: the standalone boundary.
run: build
	bash examples/run.sh

# A cluster on one machine: its own etcd (127.0.0.1, STOCKADE_ETCD_PORT,
# default 23790, and the next port), three gateway nodes n1 n2 n3 sharing one
# state dir (STOCKADE_CLUSTER_BASE_PORT, default 7421, and the next two), six
# sample sandboxes placed on them by rendezvous hashing, their owners and what to try (kill a
# node: its sandboxes move). Needs etcd (Debian: etcd-server).
# Ctrl-C removes everything it made, etcd's data too.
run-cluster: build
	bash examples/run-cluster.sh

run-boundary: build
	bash examples/run-boundary.sh

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet $(PKGS)

# No build outputs in git: no tracked file over 3 MB, no compiled binary.
repo-check:
	@if git rev-parse --git-dir >/dev/null 2>&1; then \
	  big=$$(git ls-files -z | xargs -0 -r stat -c '%s %n' 2>/dev/null | awk '$$1 > 3000000 {print $$2}'); \
	  if [ -n "$$big" ]; then echo "files over 3 MB are tracked (build outputs do not belong in git): $$big"; exit 1; fi; \
	  elf=$$(git ls-files -z | xargs -0 -r sh -c 'for f; do [ -f "$$f" ] && [ "$$(head -c 4 "$$f" | od -An -c | tr -d " ")" = "177ELF" ] && echo "$$f"; done; true' sh); \
	  if [ -n "$$elf" ]; then echo "compiled binaries are tracked: $$elf"; exit 1; fi; \
	fi

# Unit, integration and end-to-end tests (real sockets on 127.0.0.1, real
# curl and dig). Tests that need root or tools skip outside CI and fail in CI.
test: fmt-check vet repo-check
	$(GO) test -count=1 -timeout 15m $(PKGS)
	$(GO) test -count=1 -race -timeout 10m ./actors/... ./audit/... ./chaos/fault/... ./boundary/...
	# One chaos run per race-checked process: protoactor's remote.Start sets
	# grpc's global logger, which races with the previous remote's lingering
	# grpc goroutines when a second client starts in the same process. (The
	# cluster run, TestChaosClusterShortRun, starts a client per node: it
	# runs in the pass above only.)
	$(GO) test -count=1 -race -timeout 10m -run 'TestChaosShortRun|TestPlan|TestKind' ./chaos/

# Benchmarks side by side with peers (tinyproxy, dnsmasq, dnsperf); not in CI.
# As root it also measures a sandbox (a gateway and one sandbox; the loads
# run inside it through its supervisor's boundary) and reports RSS idle and
# with 1,000 tunnels open; otherwise those rows say why they are missing.
# Rounds and their length are benchtable's defaults (10 of 3 s).
bench: build
	$(GO) run ./bench/cmd/benchtable -stockade $(BIN) -fail-on-miss=false

# The soak (not in CI): 16 clients through `boundary serve` for SOAK
# (default 10m), its RSS sampled every 10 s; exit 1 when it grows (the last
# minute's median over 1.2x the first minute's after a 1-minute warm-up,
# plus 8 MiB; windows shrink for short soaks). `make bench-soak SOAK=1m`.
SOAK ?= 10m
bench-soak: build
	$(GO) run ./bench/cmd/benchsoak -stockade $(BIN) -duration $(SOAK)

# The cluster's benchmark (not in CI: hundreds of sandboxes for minutes;
# needs root and etcd): failover time against sandbox count (30, 100, 200
# over 3 nodes) and get/list p50/p99 with 200 sandboxes, 3 nodes against 1.
bench-cluster: build
	CI=true $(GO) test -count=1 -timeout 30m -run '^$$' -bench 'BenchmarkCluster$$' -benchtime 1x -v ./e2e/

# The long chaos runs (root: sandboxes map a host uid range): one gateway,
# every fault kind until 10,000 faults are injected (chaos-report.json);
# then the cluster run (chaos-cluster). CI runs short ones (chaos/run_test.go).
chaos: build
	./$(BIN) chaos run --scenario all --seed 20261130 --faults 10000 --duration 45m --report chaos-report.json
	$(MAKE) chaos-cluster

# The long cluster chaos run: 3 gateway nodes on their own etcd (etcd-server),
# 30 minutes of node SIGKILL and SIGSTOP past the lease TTL, etcd SIGKILL and
# restart, a node cut from etcd, mixed with every other kind; the table is
# printed, the JSON report written to chaos-cluster-report.json.
chaos-cluster: build
	./$(BIN) chaos run --cluster --seed 20261201 --duration 30m --report chaos-cluster-report.json

fuzz:
	$(GO) test -run '^$$' -fuzz FuzzParse -fuzztime 60s ./policy/
	$(GO) test -run '^$$' -fuzz FuzzAnswer -fuzztime 60s ./boundary/dnsproxy/
	$(GO) test -run '^$$' -fuzz FuzzCutter -fuzztime 60s ./internal/linelimit/
	$(GO) test -run '^$$' -fuzz FuzzReadFrames -fuzztime 60s ./sandbox/nsrun/

# Regenerate the committed protobuf code with the pinned plugin (the
# google.golang.org/protobuf version of go.mod) and Debian's protoc.
PROTOACTOR_DIR = $(shell $(GO) list -m -f '{{.Dir}}' github.com/asynkron/protoactor-go)
generate:
	$(GO) build -o bin/protoc-gen-go google.golang.org/protobuf/cmd/protoc-gen-go
	protoc -I messages -I $(PROTOACTOR_DIR)/actor --plugin=protoc-gen-go=bin/protoc-gen-go \
	  --go_out=. --go_opt=module=github.com/stockade-dev/stockade \
	  --go_opt=Mactor.proto=github.com/asynkron/protoactor-go/actor messages/stockade.proto

# CI: the committed generated code must match the .proto files.
generate-check: generate
	@git diff --exit-code -- messages/ || { echo "messages/*.pb.go is stale: run make generate and commit"; exit 1; }

clean:
	rm -rf bin

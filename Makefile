# plugvisor build. `make help` lists the targets.

GO          ?= go
BIN         := $(CURDIR)/.bin
PROTOC      ?= protoc
PROTOC_GEN_GO := $(BIN)/protoc-gen-go
PROTOACTOR_DIR = $(shell $(GO) list -m -f '{{.Dir}}' github.com/asynkron/protoactor-go)
PROTO_FILES := $(wildcard messages/*.proto)
TEST_FLAGS  ?=
# TEST_PARALLEL is how many test binaries make test runs at a time: four,
# not one per core, since the fleet's and the CLI's tests mostly wait, so
# four overlap on two cores (warm, idle: 6m48s, against 12m32s at one per
# core). TEST_PARALLEL= (empty) gives go test's default, one per core.
TEST_PARALLEL ?= 4
BENCH       ?= .
# The build's identity, from git (see version/): the nearest release tag
# with the commits since and "-dirty" for changes, and the commit. Outside
# a checkout both are empty and the binary says "devel".
VERSION     ?= $(shell git describe --tags --match 'v[0-9]*' --always --dirty 2>/dev/null)
COMMIT      ?= $(shell git rev-parse HEAD 2>/dev/null)$(shell git diff --quiet HEAD -- 2>/dev/null || echo -dirty)
LDFLAGS     := -X github.com/plugvisor/plugvisor/version.Version=$(VERSION) -X github.com/plugvisor/plugvisor/version.Commit=$(COMMIT)

# make install puts the binary in $(DESTDIR)$(PREFIX)/bin, its man pages in
# $(DESTDIR)$(MANDIR)/man1, the systemd unit in $(DESTDIR)$(UNITDIR) and,
# when there is none, packaging/agent.hcl as $(DESTDIR)$(CONFDIR)/agent.hcl.
PREFIX      ?= /usr/local
MANDIR      ?= $(PREFIX)/share/man
UNITDIR     ?= /etc/systemd/system
CONFDIR     ?= /etc/plugvisor
DESTDIR     ?=
# make release VERSION=x.y.z builds these archs into RELEASE_DIR.
ARCHS       ?= amd64 arm64
RELEASE_DIR ?= $(BIN)/release

.PHONY: help proto build test examples readme bench bench-volumes bench-soak bench-idle bench-cluster demo demo-cluster run clean fuzz fuzz-short reliability kubelet-registration man install release

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' \
		'{ name[NR] = $$1; text[NR] = $$2; if (length($$1) > w) w = length($$1) } \
		END { for (i = 1; i <= NR; i++) printf "  make %-*s  %s\n", w, name[i], text[i] }'

$(PROTOC_GEN_GO): go.mod
	GOBIN=$(BIN) $(GO) install google.golang.org/protobuf/cmd/protoc-gen-go

proto: $(PROTOC_GEN_GO) ## regenerate messages/*.pb.go from messages/*.proto
	@command -v $(PROTOC) >/dev/null || { echo "protoc is missing: apt-get install protobuf-compiler"; exit 1; }
	$(PROTOC) --plugin=protoc-gen-go=$(PROTOC_GEN_GO) \
		-I . -I $(PROTOACTOR_DIR)/actor \
		--go_out=. --go_opt=paths=source_relative \
		$(PROTO_FILES)

build: ## build the plugvisor binary into .bin/, stamped with its version and commit
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN)/ ./cmd/...

man: build ## write the man pages of every command and help topic into .bin/man/man1
	rm -rf $(BIN)/man
	$(BIN)/plugvisor man $(BIN)/man/man1

install: ## install what make build made (run it first, as yourself): the binary, man pages, systemd unit and config; PREFIX=/usr/local, DESTDIR
	@test -x $(BIN)/plugvisor || { echo "make install installs .bin/plugvisor: run make build first (as yourself, then sudo make install)" >&2; exit 1; }
	install -D -m 0755 $(BIN)/plugvisor $(DESTDIR)$(PREFIX)/bin/plugvisor
	$(BIN)/plugvisor man $(DESTDIR)$(MANDIR)/man1 >/dev/null
	install -d -m 0755 $(DESTDIR)$(UNITDIR)
	sed 's|/usr/local/bin/plugvisor|$(PREFIX)/bin/plugvisor|g' packaging/systemd/plugvisor.service > $(DESTDIR)$(UNITDIR)/plugvisor.service
	chmod 0644 $(DESTDIR)$(UNITDIR)/plugvisor.service
	install -d -m 0700 $(DESTDIR)$(CONFDIR)
	@if [ -e $(DESTDIR)$(CONFDIR)/agent.hcl ]; then echo "kept $(DESTDIR)$(CONFDIR)/agent.hcl"; \
	else install -m 0600 packaging/agent.hcl $(DESTDIR)$(CONFDIR)/agent.hcl; fi
	@echo "installed $(DESTDIR)$(PREFIX)/bin/plugvisor; as root: systemctl daemon-reload && systemctl enable --now plugvisor (docs/systemd.md)"

release: ## release tarballs of VERSION=x.y.z for ARCHS (amd64 arm64) with SHA256SUMS into .bin/release, checked (packaging/release.sh)
	ARCHS='$(ARCHS)' OUT='$(RELEASE_DIR)' GO='$(GO)' packaging/release.sh '$(VERSION)'

test: ## go vet, then every test under the race detector (the scripts of the README and docs/ among them)
	$(GO) vet ./...
	$(GO) test -race -count=1 $(if $(TEST_PARALLEL),-p $(TEST_PARALLEL)) $(TEST_FLAGS) ./...

# examples/ is its own module (go.mod with replace ../): an outside plugin
# type, deviceplugin, embedded in the agent; see docs/plugin-types.md.
examples: ## vet and test the examples/ module (a plugin type from outside) under the race detector
	cd examples && $(GO) vet ./... && $(GO) test -race -count=1 $(TEST_FLAGS) ./...
# compat/nomad is a module of its own, on CSI spec v1.12.0 for Nomad's
# plugins/csi (see compat/nomad/README.md); its tests build the hostpath
# plugin from this module and drive it with Nomad's CSI manager.
.PHONY: compat-nomad
compat-nomad: ## test compat/nomad, the drop-in for Nomad's dynamic plugin registry, against Nomad's own CSI manager
	cd compat/nomad && $(GO) vet ./... && $(GO) test -race -count=1 $(TEST_FLAGS) ./...

# compat/moby is a module of its own, so that the main module never builds
# moby's daemon packages: its tests run dockerd's volume service (moby
# v28.5.2, volume/service) beside plugvisor's on the same inputs.
.PHONY: compat-moby
compat-moby: ## test plugvisor's Docker volume service against dockerd's own, side by side (docs/docker.md's differences)
	cd compat/moby && $(GO) vet ./... && $(GO) test -race -count=1 $(TEST_FLAGS) ./...

# The command blocks of the README and docs/*.md run as testscript files
# (cmd/plugvisor/testdata/readme) against a real agent; make test runs
# them too.
readme: ## run the command blocks of the README and docs/ against a real agent, and check they match their scripts
	$(GO) test -race -count=1 -run '^TestTheReadme' -v ./cmd/plugvisor

# Fuzz targets, as package:Target. Each runs alone (go test -fuzz takes one
# target at a time); its seed corpus is in the package's testdata/fuzz/, and
# any input that fails is written there too, to become a regression test.
FUZZ_TARGETS := \
	names:FuzzCheck names:FuzzCheckSocketPath names:FuzzCheckKey names:FuzzText \
	registry:FuzzValidatePlugin registry:FuzzLoad \
	csi/catalog/model:FuzzClaims internal/mountinfo:FuzzParseMountInfo \
	discovery:FuzzParseSpec discovery:FuzzParseSpecJSON discovery:FuzzDecodeManifest \
	fleet:FuzzDecodeRecord fleet:FuzzParseIndexed fleet:FuzzParseKeyring \
	api:FuzzDecodePluginBody api:FuzzDecodeVolumeBody api:FuzzDecodeAllocBody api:FuzzDecodeCreateBody \
	api:FuzzDecodeDetachBody api:FuzzDecodeExpandBody api:FuzzDecodeSnapshotBody api:FuzzDecodeDeleteSnapshotBody \
	api:FuzzDecodeDockerVolumeBody api:FuzzDecodeDockerMountBody \
	api:FuzzCheckRawString api:FuzzCreateBodyBounds \
	api:FuzzDecodeVolumeBatchBody api:FuzzDecodeDeregisterBatchBody api:FuzzDecodeExpectBody api:FuzzMountGroup \
	api:FuzzScanBody api:FuzzParseTokens cmd/plugvisor:FuzzAgentConfig csi/hostpath:FuzzReplayJournal
# FUZZTIME is a count of executions, not a duration: with a duration, Go
# 1.26's fuzz coordinator can fail a target with a bare "context deadline
# exceeded" when the time runs out under load (golang/go#75804, fixed in
# Go 1.27), and CI must not fail on that. 5000 executions take 2 to 10 s
# per target here.
FUZZTIME      ?= 5000x
FUZZTIME_LONG ?= 500000x

fuzz-short: ## run every fuzz target for FUZZTIME (default 5000 executions) each; CI runs this
	@set -e; for t in $(FUZZ_TARGETS); do \
		pkg=./$${t%%:*}; name=$${t##*:}; echo "== fuzz $$pkg $$name ($(FUZZTIME))"; \
		$(GO) test -list "^$$name\$$" $$pkg | grep -qx "$$name" || { echo "no fuzz target $$name in $$pkg" >&2; exit 1; }; \
		$(GO) test -run '^$$' -fuzz "^$$name\$$" -fuzztime $(FUZZTIME) $$pkg; \
	done

fuzz: ## run every fuzz target for FUZZTIME_LONG (default 500,000 executions) each
	$(MAKE) fuzz-short FUZZTIME=$(FUZZTIME_LONG)

# chaos: the nemesis of internal/chaos for CHAOS_DURATION (default 10m):
# random schedules of composed faults (kills, cuts, restores, drains,
# duplicate node IDs, lease revocations, plugin kills) on a real fleet of
# three agents, as root, with the invariants checked throughout; it prints
# a table.
# make test runs its fixed schedules and a minute of random ones.
CHAOS_DURATION ?= 10m
.PHONY: chaos
chaos: ## run the fleet's nemesis for CHAOS_DURATION (default 10m; as root) and print its table
	@mkdir -p $(BIN)
	@echo "chaos: $(CHAOS_DURATION) of random schedules; the whole log goes to $(BIN)/chaos.log"
	@CHAOS_DURATION=$(CHAOS_DURATION) $(GO) test -race -count=1 -timeout 60m -v -run '^TestTheFleetHoldsUnderRandomSchedules$$' ./internal/chaos/ > $(BIN)/chaos.log 2>&1; \
		status=$$?; sed -n '/seed [0-9]*:/p;/^ *| /p;/^--- /p;/^ok/p;/^FAIL/p;/violations:/,/^---/p' $(BIN)/chaos.log; \
		echo "chaos: load average $$(cut -d' ' -f1-3 /proc/loadavg)"; exit $$status

reliability: ## run the reliability suite (a few minutes, as root); its table goes into RELIABILITY.md
	RELIABILITY_OUT=$(CURDIR)/RELIABILITY.md $(GO) test -tags reliability -count=1 -timeout 20m -v ./reliability/

kubelet-registration: ## the full cycle with the real node-driver-registrar (NDR=path/to/its binary; as root): registered, healthy, a volume mounts, deregistered
	@if [ -z "$(NDR)" ] || [ ! -x "$(NDR)" ]; then \
		echo "make kubelet-registration needs NDR=path/to/node-driver-registrar, an executable (got '$(NDR)')." >&2; \
		echo "Build it from kubernetes-csi/node-driver-registrar at tag v2.17.0: its command cmd/csi-node-driver-registrar," >&2; \
		echo "offline from the vendored modules in its repository (the module proxy cannot install it: its tags lack /v2)." >&2; \
		echo "See docs/kubernetes.md." >&2; \
		exit 2; \
	fi
	PLUGVISOR_NDR=$(abspath $(NDR)) $(GO) test -race -count=1 -timeout 5m -v -run '^TestTheRealNodeDriverRegistrarRegistersAPluginThatMountsAVolume$$' ./agent/

bench: ## run the benchmarks (BENCH=regexp to pick)
	$(GO) test -run '^$$' -bench '$(BENCH)' -benchmem ./...

bench-volumes: ## the volume manager's 100-volume mount+unmount benchmark, on TMPDIR and (as root) on an ext4 with a journal
	bench/volumes.sh $(BENCH_VOLUMES_COUNT)

bench-soak: ## 100,000 claims and releases on 100 volumes of one etcd, compaction off and on: the db and the history kept
	$(GO) test -run '^$$' -bench '^BenchmarkSoak$$' -benchtime 100000x -timeout 30m ./fleet/

bench-idle: ## the idle CPU of one agent's fleet loops (GC, Detacher) at 1,000 and 10,000 volumes, etcd in another process
	$(GO) test -tags idlecpu -run '^TestIdleCPU$$' -count=1 -v -timeout 30m ./fleet/

bench-cluster: ## the cluster benchmarks: 3 members × 8 callers, and a fleet of 20 members with 10,000 volumes, each against bare etcd
	@start=$$(date +%s); $(GO) test -run '^$$' -bench . -benchtime 4000x -timeout 20m ./fleet/member/ && \
		echo "bench-cluster: $$(( $$(date +%s) - start )) s, load average $$(cut -d' ' -f1-3 /proc/loadavg)"

# bench-compare: the bench/ module (its own go.mod, so the main module never
# depends on Nomad) runs the registry workloads against Nomad's registry,
# plugvisor's and raw protoactor in one run. The fixed-work benchmarks
# (interleaved windows, a one-off measurement) run with -benchtime 1x in a
# test process of their own. Each process runs Nomad's side and plugvisor's
# side of a workload back to back; BENCH_COMPARE_COUNT rounds, each noted
# with its load average, and the report takes the median of each figure
# and of each round's plugvisor / Nomad ratio. bench/cmd/report writes the table into
# BENCHMARKS.md. A benchmark that fails or a process that dies (a loaded
# machine) never stops the run: the failure is noted in the output, its
# rows say "no figure", and the table is written all the same.
BENCH_COMPARE_DIR   := $(BIN)/bench-compare
BENCH_COMPARE_ONCE  := StuckSubscriber|MemoryPerPlugin
BENCH_COMPARE_COUNT ?= 5
BENCH_VOLUMES_COUNT ?= 5
.PHONY: bench-compare
bench-compare: SHELL := /bin/bash
bench-compare: .SHELLFLAGS := -eo pipefail -c
bench-compare: ## compare the registry with Nomad's and raw protoactor; table into BENCHMARKS.md
	@mkdir -p $(BENCH_COMPARE_DIR)
	cd bench && $(GO) test -c -o $(BENCH_COMPARE_DIR)/bench.test .
	cd $(BENCH_COMPARE_DIR) && rm -f timed.txt once.txt && for i in $$(seq $(BENCH_COMPARE_COUNT)); do \
		echo "bench-compare: round $$i, load average $$(cut -d' ' -f1-3 /proc/loadavg)" | tee -a timed.txt; \
		./bench.test -test.run '^$$' -test.bench . -test.skip '$(BENCH_COMPARE_ONCE)' \
			-test.benchtime 1s -test.benchmem -test.timeout 8m 2>&1 | tee -a timed.txt \
			|| echo "bench-compare: round $$i: the timed benchmarks failed; the rows they lack say so" | tee -a timed.txt; \
		echo "bench-compare: round $$i, load average $$(cut -d' ' -f1-3 /proc/loadavg)" | tee -a once.txt; \
		./bench.test -test.run '^$$' -test.bench '$(BENCH_COMPARE_ONCE)' \
			-test.benchtime 1x -test.timeout 8m 2>&1 | tee -a once.txt \
			|| echo "bench-compare: round $$i: the one-off benchmarks failed; the rows they lack say so" | tee -a once.txt; \
	done
	cd bench && $(GO) run ./cmd/report -out $(CURDIR)/BENCHMARKS.md -command 'make bench-compare' \
		$(BENCH_COMPARE_DIR)/timed.txt $(BENCH_COMPARE_DIR)/once.txt

demo: ## run the self-contained demo (a temp dir, nothing to set up)
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN)/plugvisor ./cmd/plugvisor
	$(BIN)/plugvisor demo

demo-cluster: ## run three agents on etcd in a temp dir: a claim race, a node killed, the catalog kept right
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN)/plugvisor ./cmd/plugvisor
	$(BIN)/plugvisor demo-cluster

run: ## run an agent in ./.plugvisor (stop it with Ctrl-C)
	$(GO) run ./cmd/plugvisor agent

clean: ## remove build output
	rm -rf $(BIN)

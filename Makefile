# plugvisor build. `make help` lists the targets.

GO          ?= go
BIN         := $(CURDIR)/.bin
PROTOC      ?= protoc
PROTOC_GEN_GO := $(BIN)/protoc-gen-go
PROTOACTOR_DIR = $(shell $(GO) list -m -f '{{.Dir}}' github.com/asynkron/protoactor-go)
PROTO_FILES := $(wildcard messages/*.proto)
TEST_FLAGS  ?=
BENCH       ?= .

.PHONY: help proto build test bench demo run clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-8s %s\n", $$1, $$2}'

$(PROTOC_GEN_GO): go.mod
	GOBIN=$(BIN) $(GO) install google.golang.org/protobuf/cmd/protoc-gen-go

proto: $(PROTOC_GEN_GO) ## regenerate messages/*.pb.go from messages/*.proto
	@command -v $(PROTOC) >/dev/null || { echo "protoc is missing: apt-get install protobuf-compiler"; exit 1; }
	$(PROTOC) --plugin=protoc-gen-go=$(PROTOC_GEN_GO) \
		-I . -I $(PROTOACTOR_DIR)/actor \
		--go_out=. --go_opt=paths=source_relative \
		$(PROTO_FILES)

build: ## build the plugvisor binary into .bin/
	$(GO) build -o $(BIN)/ ./cmd/...

test: ## go vet, then every test under the race detector
	$(GO) vet ./...
	$(GO) test -race -count=1 $(TEST_FLAGS) ./...

bench: ## run the benchmarks (BENCH=regexp to pick)
	$(GO) test -run '^$$' -bench '$(BENCH)' -benchmem ./...

demo: ## run the self-contained demo
	@echo "make demo: the demo arrives with the plugvisor binary (issue 7); nothing to run yet."; exit 2

run: ## run an agent in ./.plugvisor (stop it with Ctrl-C)
	$(GO) run ./cmd/plugvisor agent

clean: ## remove build output
	rm -rf $(BIN)

# leaderrun — build, test and package.
#
#   make build     bin/leaderrun
#   make test      everything CI runs: real servers built, vet, gofmt, go test -race
#   make servers   build the real etcd and Consul used by the tests (cached)

GO      ?= go
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -s -w -X main.version=$(VERSION)

.PHONY: all build servers deps vet test

all: build

build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/leaderrun .

servers:
	scripts/build-servers.sh

# Debian packages the tests need, installed only when missing.
deps:
	scripts/install-deps.sh

vet:
	$(GO) vet ./...
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

test: deps servers vet
	$(GO) test -race -count=1 -timeout 20m ./...

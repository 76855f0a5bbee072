# leaderrun — build, test and package.
#
#   make build     bin/leaderrun
#   make test      everything CI runs: real servers built, vet, gofmt, go test -race
#   make servers   build the real etcd, Consul and kube-apiserver used by the tests (cached)
#   make dist      stage the binary, man page and completions in dist/
#   make packages  dist/*.deb and dist/*.rpm (nfpm, installed into bin/)
#   make package-test  build the packages and run only their test
#   make systemd-root  the Debian root tests/systemdtest boots systemd in (cached)

GO      ?= go
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT  ?= $(shell git rev-parse --short=12 HEAD 2>/dev/null)
# The package whose version and commit -X sets (a test in tests/repo checks it).
VERSION_PKG := github.com/leaderrun/leaderrun/internal/cmdline
LDFLAGS := -s -w -X $(VERSION_PKG).version=$(VERSION) -X $(VERSION_PKG).commit=$(COMMIT)
# urfave/cli without its Markdown and man page writers (leaderrun writes
# its own): their package init built 0.2 MB of heap that every leaderrun
# kept. tests/chaos builds with the same tags.
TAGS    := urfave_cli_no_docs

# Packages: a release tag vX.Y.Z gives version X.Y.Z; any other commit
# 0.0.0~git<commit time, UTC>.<commit>, which sorts before every release
# and after the builds of earlier commits (a hash alone sorts at random,
# and apt refuses the newer build as a downgrade).
GOARCH         ?= $(shell $(GO) env GOARCH)
PKG_VERSION    ?= $(shell git describe --tags --match 'v[0-9]*' --exact-match 2>/dev/null | sed 's/^v//' | grep . || echo "0.0.0~git$$(TZ=UTC git log -1 --date=format-local:%Y%m%d%H%M%S --format=%cd.%h 2>/dev/null || echo unknown)")
PKG_MAINTAINER ?= $(shell git log -1 --format='%an <%ae>' 2>/dev/null || echo leaderrun maintainers)
NFPM_VERSION   := v2.45.2
NFPM           := bin/nfpm

.PHONY: all build servers deps vet test dist nfpm packages package-test systemd-root

all: build

build:
	CGO_ENABLED=0 $(GO) build -trimpath -tags '$(TAGS)' -ldflags '$(LDFLAGS)' -o bin/leaderrun .
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '-s -w' -o bin/leaderrun-guard ./cmd/leaderrun-guard

servers:
	scripts/build-servers.sh

# Debian packages the tests need, installed only when missing.
deps:
	scripts/install-deps.sh

vet:
	$(GO) vet ./...
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

# The package test (tests/e2e TestPackages) runs when LEADERRUN_PACKAGE_DIR
# names the built packages; it adds a few seconds once nfpm is built.
test: deps servers systemd-root vet packages
	LEADERRUN_PACKAGE_DIR=$(CURDIR)/dist LEADERRUN_SYSTEMD_ROOT=$(SYSTEMD_ROOT) $(GO) test -race -count=1 -timeout 30m ./...

# A bookworm root with systemd for tests/systemdtest, built once by
# debootstrap from this machine's apt mirror (about a minute, cached in the
# git-ignored bin/; a warm run only checks its stamp).
SYSTEMD_ROOT ?= $(CURDIR)/bin/.systemd-root
systemd-root: deps
	scripts/systemd-root.sh $(SYSTEMD_ROOT)

# Only the tests of the package under a real systemd (tests/systemdtest).
.PHONY: systemd-test
systemd-test: servers systemd-root packages
	LEADERRUN_PACKAGE_DIR=$(CURDIR)/dist LEADERRUN_SYSTEMD_ROOT=$(SYSTEMD_ROOT) $(GO) test -count=1 -v ./tests/systemdtest/

# The files the packages ship: leaderrun's man page and completions
# generated from the CLI definition by the hidden `leaderrun gen` (run on
# this machine, so GOARCH may differ); the guard's man page; the docs
# compressed as Debian wants them; the changelogs, from packaging/changelog
# with an entry for this build on top when it is not a release.
# The operator's documents the README links to, shipped beside it in
# docs/ as the links say (the chaos and benchmark method stay in the tree).
SHIPPED_DOCS := REFERENCE OPERATING BACKENDS SAFETY FENCING
PKG_COMMIT := $(shell git rev-parse --short HEAD 2>/dev/null || echo unknown)
PKG_DATE   := $(shell git log -1 --format=%ct 2>/dev/null || echo 0)
dist: build
	rm -rf dist && mkdir -p dist/completions dist/doc/docs
	CGO_ENABLED=0 GOARCH=$(GOARCH) $(GO) build -trimpath -tags '$(TAGS)' -ldflags '$(LDFLAGS)' -o dist/leaderrun .
	CGO_ENABLED=0 GOARCH=$(GOARCH) $(GO) build -trimpath -ldflags '-s -w' -o dist/leaderrun-guard ./cmd/leaderrun-guard
	bin/leaderrun gen man > dist/leaderrun.1 && gzip -9n dist/leaderrun.1
	gzip -9n < packaging/leaderrun-guard.1 > dist/leaderrun-guard.1.gz
	bin/leaderrun gen bash > dist/completions/leaderrun.bash
	bin/leaderrun gen zsh > dist/completions/_leaderrun
	gzip -9n < README.md > dist/doc/README.md.gz
	gzip -9n < docs/DESIGN.md > dist/doc/DESIGN.md.gz
	gzip -9n < docs/DESIGN-SAFETY.md > dist/doc/DESIGN-SAFETY.md.gz
	for d in $(SHIPPED_DOCS); do gzip -9n < docs/$$d.md > dist/doc/docs/$$d.md.gz; done
	packaging/changelog.sh deb '$(PKG_VERSION)' '$(PKG_MAINTAINER)' '$(PKG_DATE)' '$(PKG_COMMIT)' > dist/doc/changelog
	gzip -9n dist/doc/changelog
	packaging/changelog.sh rpm '$(PKG_VERSION)' '$(PKG_MAINTAINER)' '$(PKG_DATE)' '$(PKG_COMMIT)' > dist/changelog.yml

# nfpm, pinned, into the git-ignored bin/ (first build takes a minute or two).
nfpm:
	@$(GO) version -m $(NFPM) 2>/dev/null | grep -q 'mod.*goreleaser/nfpm/v2.*$(NFPM_VERSION)' || \
		{ echo "installing nfpm $(NFPM_VERSION) into bin/"; GOBIN=$(CURDIR)/bin $(GO) install github.com/goreleaser/nfpm/v2/cmd/nfpm@$(NFPM_VERSION); }

# The .rpm's configuration is packaging/nfpm.yaml with the changelog
# added (see there why the .deb's is not nfpm's).
packages: dist nfpm
	{ cat packaging/nfpm.yaml; echo 'changelog: dist/changelog.yml'; } > dist/nfpm-rpm.yaml
	for p in deb:packaging/nfpm.yaml rpm:dist/nfpm-rpm.yaml; do \
		VERSION='$(PKG_VERSION)' GOARCH='$(GOARCH)' PKG_MAINTAINER='$(PKG_MAINTAINER)' \
			$(NFPM) package --config $${p#*:} --packager $${p%%:*} --target dist/ || exit 1; \
	done

package-test: packages
	LEADERRUN_PACKAGE_DIR=$(CURDIR)/dist $(GO) test -count=1 -run 'TestPackages|TestSystemdUnit' ./tests/e2e/

# Chaos suite (tests/chaos, docs/CHAOS.md): CHAOS_FAULTS faults per
# backend on real 3-server etcd, Consul and ZooKeeper clusters, a
# kube-apiserver, a PostgreSQL server, a dynalite server (DynamoDB) and
# the local backend, three leaderrun hosts each, a fenced resource; the
# hosts take turns with the containment modes of CHAOS_CONTAIN, in blocks
# of ten faults. Writes the
# results into a new file docs/results/chaos-DATE-BACKENDS.md and lists
# it in docs/CHAOS.md's Results. The backends run side by side;
# Consul, the slowest, sets the time: well over an hour with the defaults
# on two cores. Not part of `make test`. CHAOS_HOLDERS=3 runs the holders
# mode instead: five hosts with --holders 3, a fenced resource per slot.
# CHAOS_CONTROL=N mixes in the operator's control faults (step-down,
# step-down --to, pause/resume, priority changes), each N times as often
# as another fault type, and gives the hosts random priorities.
CHAOS_FAULTS   ?= 200
CHAOS_SEED     ?= 0
CHAOS_BACKENDS ?= etcd,consul,zookeeper,kubernetes,postgres,dynamodb,local
CHAOS_CONTAIN  ?= cgroup,group
CHAOS_HOLDERS  ?= 1
CHAOS_CONTROL  ?= 0

.PHONY: chaos
chaos: deps servers
	$(GO) test -count=1 -timeout 4h -run 'TestChaos$$' -v ./tests/chaos/ -args \
		-chaos.faults=$(CHAOS_FAULTS) -chaos.seed=$(CHAOS_SEED) -chaos.backends=$(CHAOS_BACKENDS) \
		-chaos.contain=$(CHAOS_CONTAIN) -chaos.holders=$(CHAOS_HOLDERS) -chaos.control=$(CHAOS_CONTROL) -chaos.report=$(CURDIR)/docs/results/ -chaos.index=$(CURDIR)/docs/CHAOS.md \
		-chaos.command='make chaos CHAOS_FAULTS=$(CHAOS_FAULTS) CHAOS_BACKENDS=$(CHAOS_BACKENDS) CHAOS_CONTAIN=$(CHAOS_CONTAIN)$(if $(filter-out 1,$(CHAOS_HOLDERS)), CHAOS_HOLDERS=$(CHAOS_HOLDERS))$(if $(filter-out 0,$(CHAOS_CONTROL)), CHAOS_CONTROL=$(CHAOS_CONTROL))'

# Benchmark (tests/bench, docs/BENCHMARKS.md): leaderrun against
# `etcdctl lock` and `consul lock` on the same real 3-server clusters, on a
# 3-server ZooKeeper ensemble, a PostgreSQL server and a dynalite server,
# and against client-go's leaderelection on a kube-apiserver; writes the
# results into a new file docs/results/bench-DATE-full.md and lists it in
# docs/BENCHMARKS.md's Results. Takes about 20 minutes; not part of
# `make test` (TestBenchSmoke, TestBenchZooKeeper, TestBenchKubernetes,
# TestBenchPostgres and TestBenchDynamoDB are).
.PHONY: bench
bench: deps servers
	$(GO) test -count=1 -timeout 60m -run 'TestBenchmark$$' -v ./tests/bench/ -args \
		-bench.full -bench.report=$(CURDIR)/docs/results/ -bench.index=$(CURDIR)/docs/BENCHMARKS.md -bench.command='make bench'

# The --holders 3 rows alone (leaderrun on etcd and Consul, consul lock -n 3):
# writes docs/results/bench-DATE-holders.md, listed in docs/BENCHMARKS.md.
HOLDERS_TRIALS ?= 10
.PHONY: bench-holders
bench-holders: deps servers
	$(GO) test -count=1 -timeout 60m -run 'TestBenchHolders$$' -v ./tests/bench/ -args \
		-bench.holders=$(HOLDERS_TRIALS) -bench.report=$(CURDIR)/docs/results/ -bench.index=$(CURDIR)/docs/BENCHMARKS.md \
		-bench.command='make bench-holders HOLDERS_TRIALS=$(HOLDERS_TRIALS)'

# Step-down alone: `leaderrun step-down`, `step-down --to` and SIGTERM to
# the leader, with two standbys, on every backend (a few minutes): writes
# docs/results/bench-DATE-stepdown.md, listed in docs/BENCHMARKS.md; the
# rivals' rows come from the newest bench-DATE-full.md there.
STEPDOWN_ROUNDS ?= 5
.PHONY: bench-stepdown
bench-stepdown: deps servers
	$(GO) test -count=1 -timeout 30m -run 'TestStepDown$$' -v ./tests/bench/ -args \
		-bench.stepdown=$(STEPDOWN_ROUNDS) -bench.report=$(CURDIR)/docs/results/ -bench.index=$(CURDIR)/docs/BENCHMARKS.md \
		-bench.command='make bench-stepdown STEPDOWN_ROUNDS=$(STEPDOWN_ROUNDS)'

# PSS with 10 instances: 10 leaderruns of one key (a leader, its guard,
# 9 standbys) on each backend, one at a time (a few minutes): writes
# docs/results/bench-DATE-pss.md, listed in docs/BENCHMARKS.md; `make
# test` runs its code once (TestBenchPSSSmoke).
PSS_INSTANCES ?= 10
.PHONY: bench-pss
bench-pss: deps servers
	$(GO) test -count=1 -timeout 30m -run 'TestBenchPSS$$' -v ./tests/bench/ -args \
		-bench.pss=$(PSS_INSTANCES) -bench.footprint=30s -bench.report=$(CURDIR)/docs/results/ -bench.index=$(CURDIR)/docs/BENCHMARKS.md \
		-bench.command='make bench-pss PSS_INSTANCES=$(PSS_INSTANCES)'

# The failover path alone, step by step, on every backend (a few minutes):
# writes docs/results/bench-DATE-breakdown.md, listed in docs/BENCHMARKS.md.
BREAKDOWN_TRIALS ?= 5
# Only some backends (comma-separated, e.g. etcd,local); empty: all.
BREAKDOWN_BACKENDS ?=
.PHONY: bench-breakdown
bench-breakdown: deps servers
	$(GO) test -count=1 -timeout 20m -run 'TestBreakdown$$' -v ./tests/bench/ -args \
		-bench.breakdown=$(BREAKDOWN_TRIALS) -bench.breakdown-backends=$(BREAKDOWN_BACKENDS) -bench.report=$(CURDIR)/docs/results/ -bench.index=$(CURDIR)/docs/BENCHMARKS.md \
		-bench.command='make bench-breakdown BREAKDOWN_TRIALS=$(BREAKDOWN_TRIALS) BREAKDOWN_BACKENDS=$(BREAKDOWN_BACKENDS)'

# Failover as leaderrun's target states it, on an idle machine: from just
# before kill(2) of the leader's leaderrun to the standby's stamp child's
# first instruction, on CLOCK_REALTIME, one server per backend, no proxy:
# writes docs/results/bench-DATE-stamp.md, listed in docs/BENCHMARKS.md.
STAMP_TRIALS ?= 20
# The backends (comma-separated); kubernetes, postgres and dynamodb may be
# added.
STAMP_BACKENDS ?= local,etcd,consul,zookeeper
.PHONY: bench-stamp
bench-stamp: deps servers
	$(GO) test -count=1 -timeout 30m -run 'TestBenchStamp$$' -v ./tests/bench/ -args \
		-bench.stamp=$(STAMP_TRIALS) -bench.stamp-backends=$(STAMP_BACKENDS) -bench.report=$(CURDIR)/docs/results/ -bench.index=$(CURDIR)/docs/BENCHMARKS.md \
		-bench.command='make bench-stamp STAMP_TRIALS=$(STAMP_TRIALS) STAMP_BACKENDS=$(STAMP_BACKENDS)'

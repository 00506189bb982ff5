# deskfarm: `make run` serves a farm on localhost, `make test` runs the whole suite.
# Both install what is missing first (scripts/setup-host.sh, idempotent).
SHELL := /bin/bash
export PATH := /usr/local/go/bin:$(PATH)
export GOFLAGS ?= -mod=mod

BIN      := bin/deskfarm
LISTEN   ?= 127.0.0.1:8080
IMAGES   ?= desktop
GO_TEST_TIMEOUT ?= 75m
# The soak benchmark's length: 20 minutes by `make soak`, 2 in `make test`.
SOAK_DURATION ?= 20m
SOAK_PARALLEL ?= 2

.PHONY: run test setup build images unit e2e vet bench soak clean novnc kube osworld-tasks

# Where the osworld image is built (make test builds it, or
# `make run IMAGES="desktop osworld"`), its pool keeps one VM warm too: made
# from the saved ready state in seconds, after the first one's boot
# (bench/osworldwarm, docs/benchmarks.md).
run: setup build
	$(BIN) image build $(IMAGES)
	$(BIN) serve --listen $(LISTEN) --warm $(firstword $(IMAGES)) \
		$$($(BIN) image ls | awk '$$1 == "osworld" && $$3 == "built" { print "--pool osworld.min_warm=1"; exit }')

# The control plane's first build (15 min on a fresh 2-core machine;
# CPU-bound) runs beside the build, vet, unit tests and image builds (much
# of which waits on downloads and disk), so a fresh machine pays for the
# longer of the two, not both: started after the images, as before, the E2E
# tests waited 7 min for it (2026-12-02). Later runs find both cached.
test: setup
	@mkdir -p bin; echo "kube: building or finding the control plane in the background (log bin/kube-build.log)"; \
	scripts/kube/build.sh >bin/kube-build.out 2>bin/kube-build.log & kube=$$!; \
	$(MAKE) --no-print-directory build vet unit && $(BIN) image build tiny desktop osworld; rc=$$?; \
	wait $$kube; k=$$?; \
	if [ $$k != 0 ]; then cat bin/kube-build.log >&2; echo "kube: scripts/kube/build.sh failed" >&2; exit $$k; fi; \
	echo "kube: control plane binaries in $$(cat bin/kube-build.out)"; exit $$rc
	DESKFARM_REQUIRE_VM=1 go test -count=1 -timeout $(GO_TEST_TIMEOUT) -p 1 -run 'E2E' ./...
	go run ./bench/soak -duration 2m -parallel $(SOAK_PARALLEL)
	scripts/check-leftovers.sh

setup:
	@scripts/setup-host.sh
	@$(MAKE) --no-print-directory novnc

# noVNC (browser takeover) is served from disk, not embedded: a fresh clone
# builds without npm. deskfarm serve finds it here (web.DefaultNoVNCDir).
NOVNC_VERSION ?= 1.7.0
novnc:
	@test -f web/assets/vendor/node_modules/@novnc/novnc/core/rfb.js || \
		npm install --prefix web/assets/vendor --no-save --no-package-lock --no-audit --no-fund @novnc/novnc@$(NOVNC_VERSION)

# The real Kubernetes control plane the cluster tests run against
# (kube-apiserver, kubectl, etcd, built from the Go module proxy; see
# internal/kubetest): minutes the first time, then cached under
# /var/cache/deskfarm/kube by version and recipe.
kube:
	@d=$$(scripts/kube/build.sh) && echo "kube: control plane binaries in $$d"

build:
	go build -o $(BIN) ./cmd/deskfarm

vet:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo "gofmt needed"; exit 1; }
	go vet ./...

unit:
	go test -count=1 -skip 'E2E' ./...
	python3 -m unittest discover -s python/tests

bench: setup build
	$(BIN) image build desktop tiny
	go run ./bench/reset

# Parallel episodes of random valid and invalid requests on a farm of its
# own; fails if a lease was lost or a domain, overlay, fd or goroutine leaked.
soak: setup build
	$(BIN) image build tiny
	go run ./bench/soak -duration $(SOAK_DURATION) -parallel $(SOAK_PARALLEL)

# OSWorld's own tasks set up and graded untouched (python/osworld_tasks.py,
# docs/osworld.md) against a running farm (make run's, by default), with
# OSWORLD naming a checkout of OSWorld (desktop_env/ and
# evaluation_examples/; GitHub is not reachable from CI, so no test fetches
# one). Its host packages come from Debian (setup-host.sh osworld-tasks).
OSWORLD ?=
DESKFARM_URL ?= http://$(LISTEN)
OSWORLD_TASKS_ARGS ?= --per-domain 4
osworld-tasks:
	@test -n "$(OSWORLD)" || { echo "make osworld-tasks: set OSWORLD=DIR, a checkout of OSWorld" >&2; exit 2; }
	@scripts/setup-host.sh osworld-tasks
	DESKFARM_URL=$(DESKFARM_URL) /usr/bin/python3 python/osworld_tasks.py --osworld $(OSWORLD) \
		--out bin/osworld-tasks.jsonl $(OSWORLD_TASKS_ARGS)

clean:
	rm -rf bin

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

# scripts/test.sh: build, vet, unit tests, images, E2E tests, soak and the
# leftover check, each phase timed, with the control plane for the cluster
# tests built in the background from the start and the cluster packages'
# E2E tests beside the others once it is built (CI's budget; see the script).
test: setup
	@GO_TEST_TIMEOUT=$(GO_TEST_TIMEOUT) SOAK_PARALLEL=$(SOAK_PARALLEL) scripts/test.sh

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

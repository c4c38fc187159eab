# Tenantplane: the two commands of a fresh machine are `make run` and `make test`.
SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
CARGO ?= cargo

.PHONY: run test deps test-env fmt-check clippy test-only generate

## run: serve the API on a local PostgreSQL that it starts itself (DATABASE_URL unset)
run:
	$(CARGO) run --release -- serve

## test: install what is missing, build the cached binaries, then fmt, clippy, every test, leftover check
test: deps test-env fmt-check clippy test-only
	scripts/check-leftovers

deps:
	scripts/install-deps

test-env:
	scripts/test-env build

fmt-check:
	$(CARGO) fmt --check

clippy:
	$(CARGO) clippy --all-targets -- -D warnings

test-only:
	$(CARGO) test --all-targets -- --test-threads=8

## generate: rewrite the committed generated artifacts (CRD YAML)
generate:
	$(CARGO) run -q -- crdgen

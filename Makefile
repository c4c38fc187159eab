# Tenantplane: the two commands of a fresh machine are `make run` and `make test`.
SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
CARGO ?= cargo
# Builds use the committed query data in .sqlx/ (no database at compile time); a query without
# up-to-date data fails to compile. Refresh it with `scripts/dev-db prepare`.
export SQLX_OFFLINE := true

.PHONY: run test test-deep check-disk deps test-env fmt-check clippy openapi-check deny sqlx-check test-only generate portal

# What `deps` installs: only `make run`'s packages when run is the only goal (it is the default goal),
# everything `make test` needs otherwise (see scripts/install-deps).
DEPS_PROFILE ?= $(if $(filter-out run,$(or $(MAKECMDGOALS),run)),test,run)

## run: install what is missing (deps), then PostgreSQL, etcd, kube-apiserver and Tenantplane (serve,
## worker, controllers, pod-less runner); prints the URLs, two tokens, a curl that creates a control
## plane and a kubectl line for the management cluster; Ctrl-C stops everything.
## Only the control-plane binaries of the main version are needed (no extra versions), plus kubeadm and
## kubemark for the banner's "join a node" line.
run: deps
	TENANTPLANE_KUBE_EXTRA_VERSIONS= TENANTPLANE_KONNECTIVITY_VERSION= TENANTPLANE_SCHEMATHESIS_VERSION= TENANTPLANE_TS_CLIENT= TENANTPLANE_WEB_VENDOR= TENANTPLANE_PORTAL= scripts/test-env build >/dev/null
	$(CARGO) build --release --bin tenantplane
	$(CARGO) run --release -p tenantplane-devenv --bin tenantplane-dev -- up

## test: stop at once when the disk is too full for a run, install what is missing, build the cached
## binaries, then fmt, clippy, the OpenAPI document, cargo-deny, .sqlx/, every test, leftover check
test: check-disk deps test-env fmt-check clippy openapi-check deny sqlx-check test-only
	scripts/check-leftovers

## test-deep: the depth-bound tests at their full depth (schemathesis at 1,000 cases per operation,
## ~40 min): before a release, and after a change to the API's request parsing or OpenAPI document
test-deep: check-disk deps test-env
	TENANTPLANE_TEST_DEPTH=deep NEXTEST_PROFILE=deep CARGO=$(CARGO) scripts/test-all -E 'test(/^api::contract::/)'
	scripts/check-leftovers

check-disk:
	@scripts/check-disk

deps:
	@scripts/install-deps $(DEPS_PROFILE)

test-env:
	scripts/test-env build

fmt-check:
	$(CARGO) fmt --all --check

clippy:
	$(CARGO) clippy --workspace --all-targets -- -D warnings

## openapi-check: the committed OpenAPI document is valid OpenAPI 3.1 (drift is checked by the tests)
openapi-check:
	python3 -m openapi_spec_validator schema/openapi.json

## deny: cargo-deny's licenses, bans and sources checks against deny.toml (1.3 s). Not its advisories check:
## the RustSec database cannot be fetched here (see deny.toml). `cargo deny check bans` shows who pulls in
## each duplicate.
deny:
	$(CARGO) deny --locked check --hide-inclusion-graph bans licenses sources

## sqlx-check: `cargo sqlx prepare --check` against migrations/ in the dev PostgreSQL (scripts/dev-db check):
## fails when the committed .sqlx/ misses, differs from or has more than the queries' data (about 22 s warm;
## about 2 min in a new checkout, whose workspace crates it checks from scratch)
sqlx-check:
	scripts/dev-db check

## test-only: every test with cargo-nextest: groups and time budgets in .config/nextest.toml (see scripts/test-all)
test-only:
	CARGO=$(CARGO) scripts/test-all

## generate: rewrite the committed generated artifacts (CRD YAML, OpenAPI, GraphQL SDL, the TypeScript
## client's types from the OpenAPI document, with the pinned openapi-typescript)
generate:
	$(CARGO) run -q -- crdgen
	$(CARGO) run -q -- openapi > schema/openapi.json
	$(CARGO) run -q -- sdl > schema/schema.graphql
	node "$$(scripts/test-env ts-client)/node_modules/openapi-typescript/bin/cli.js" schema/openapi.json \
		-o clients/typescript/src/schema.d.ts

## portal: rebuild the portal's committed assets (crates/api/assets/portal) from web/portal with the
## locked npm packages (`npm ci`, then its type-check and Vite build); commit the result
portal:
	cd web/portal && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error && npm run build

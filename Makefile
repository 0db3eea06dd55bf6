# Holdfast: `make run` to try it, `make test` to check it. See README.md.
.PHONY: run test deps server fmt bench desktop-bundle

deps:
	@scripts/deps.sh

server: deps
	cargo build --locked -p holdfast-server

## Start the server on its embedded Postgres with demo data.
run: server
	@scripts/run.sh

## Lint and run every test (starts and stops a private Postgres).
test: deps
	@scripts/test.sh

## Benchmarks against same-run baselines (docs/BENCHMARKS.md); QUICK=1 for the short run.
bench: deps
	@QUICK=$(QUICK) scripts/bench.sh

## A long chaos run (docs/GUARANTEES.md): make chaos SEED=7 MINUTES=10 [DESKS=4 ORDERS=8 SEEDS=1]
.PHONY: chaos chaos-broken
chaos: deps
	@SEED=$(SEED) MINUTES=$(MINUTES) DESKS=$(DESKS) ORDERS=$(ORDERS) SEEDS=$(SEEDS) scripts/chaos.sh run

## Proof the chaos suite catches an oversell: it must FAIL against the broken-allocation build.
chaos-broken: deps
	@scripts/chaos.sh broken

fmt:
	cargo fmt --all

## The desktop app's .deb and AppImage (tauri-cli 2 installed once into the cache).
HOLDFAST_CACHE ?= $(HOME)/.cache/holdfast
desktop-bundle: deps
	@[ -x "$(HOLDFAST_CACHE)/bin/cargo-tauri" ] || cargo install tauri-cli --locked --version "^2" --root "$(HOLDFAST_CACHE)"
	cd ui && npm ci --no-audit --no-fund && npm run build
	cd src-tauri && PATH="$(HOLDFAST_CACHE)/bin:$$PATH" cargo tauri build --bundles deb,appimage

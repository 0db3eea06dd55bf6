# Holdfast: `make run` to try it, `make test` to check it. See README.md.
.PHONY: run test deps server server-package fmt bench desktop-bundle ui-types

deps:
	@scripts/deps.sh

server: deps
	cargo build --locked -p holdfast-server

## The server's .deb for operators (release build; prints its path and
## contents): the binary, a systemd unit, /etc/holdfast/server.toml. cargo-deb
## is pinned and installed once into the cache (scripts/server-package.sh).
server-package: deps
	@scripts/server-package.sh

## Start the server on its embedded Postgres with demo data.
run: server
	@scripts/run.sh

## Lint and run every test (starts and stops a private Postgres).
test: deps
	@scripts/test.sh

## Benchmarks against same-run baselines (docs/BENCHMARKS.md); QUICK=1 for the short run.
bench: deps
	@QUICK=$(QUICK) scripts/bench.sh

## The Rust tests while a transaction is always in flight (the feed's fence held back); all must pass.
.PHONY: test-held-fence
test-held-fence: deps
	@scripts/held-fence.sh

## A long chaos run (docs/GUARANTEES.md): make chaos SEED=7 MINUTES=10 [DESKS=4 ORDERS=8 SEEDS=1]
.PHONY: chaos chaos-broken
chaos: deps
	@SEED=$(SEED) MINUTES=$(MINUTES) DESKS=$(DESKS) ORDERS=$(ORDERS) SEEDS=$(SEEDS) scripts/chaos.sh run

## Proof the chaos suite catches an oversell: it must FAIL against the broken-allocation build.
chaos-broken: deps
	@scripts/chaos.sh broken

fmt:
	cargo fmt --all

## Rewrite ui/src/lib/generated/ from the Rust types (src-tauri/tests/ui_types.rs;
## `make test` fails while they are out of step). Compiling the desktop crate needs ui/dist.
ui-types:
	@[ -d ui/dist ] || (cd ui && npm ci --no-audit --no-fund && npm run build)
	HOLDFAST_WRITE_UI_TYPES=1 cargo test --locked -p holdfast-desktop --test ui_types

## The desktop app's .deb, .rpm and AppImage: make desktop-bundle [BUNDLES=deb,rpm]
## (into target/release/bundle/). The .rpm is written by tauri-cli itself (no
## rpmbuild, nothing downloaded). tauri-cli is pinned to the family of the
## tauri crates in Cargo.lock and installed once into the cache. tauri-cli
## runs build.beforeBuildCommand (the UI build) itself; TAURI_FRONTEND_PATH
## makes it run in ui/ wherever make is called from.
HOLDFAST_CACHE ?= $(HOME)/.cache/holdfast
TAURI_CLI_VERSION := 2.12.4
BUNDLES ?= deb,rpm,appimage
desktop-bundle: deps
	@"$(HOLDFAST_CACHE)/bin/cargo-tauri" tauri --version 2>/dev/null | grep -qx "tauri-cli $(TAURI_CLI_VERSION)" \
		|| cargo install tauri-cli --locked --version "=$(TAURI_CLI_VERSION)" --root "$(HOLDFAST_CACHE)"
	PATH="$(HOLDFAST_CACHE)/bin:$$PATH" TAURI_FRONTEND_PATH="$(CURDIR)/ui" cargo tauri build --ci --bundles $(BUNDLES) -- --locked \
		|| { echo "desktop-bundle: failed. The AppImage step needs linuxdeploy and AppRun, which tauri-cli downloads from github.com into ~/.cache/tauri;" \
		     "where that is unreachable, make desktop-bundle BUNDLES=deb,rpm builds the .deb and .rpm alone." >&2; exit 1; }

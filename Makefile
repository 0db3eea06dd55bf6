# Holdfast: `make run` to try it, `make test` to check it. See README.md.
.PHONY: run test deps server fmt

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

fmt:
	cargo fmt --all

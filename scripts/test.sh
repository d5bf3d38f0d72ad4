#!/usr/bin/env bash
# The project's test command: installs what the tests need (idempotently), then runs them.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cargo test --workspace --locked

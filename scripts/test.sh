#!/usr/bin/env bash
# The project's test command: installs what the tests need (idempotently), then runs
# the whole suite: unit, property and integration tests (including the Linux kernel
# NVMe/TCP host and target booted under QEMU); then the README's first command from a fresh
# clone built without protoc (scripts/fresh-clone-check.sh); then a short run of every
# fuzz target.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
# Every prerequisite was just installed: a test that cannot run fails (testkit::prereq).
export FERROBAY_REQUIRE_ALL="${FERROBAY_REQUIRE_ALL:-1}"
cargo test --workspace --locked
scripts/fresh-clone-check.sh
for target in $(ls fuzz/fuzz_targets | sed -n 's/\.rs$//p'); do
    fuzz/run.sh "$target" "${FUZZ_SECONDS:-20}"
done

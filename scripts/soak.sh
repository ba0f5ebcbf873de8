#!/usr/bin/env bash
# The long fault-history soak: child processes run the recipes (lock, election,
# semaphore, queue, work queue, id generator, config watch) against a 3-node ensemble
# under a seeded fault schedule, then every history is checked (integration/tests/fault_histories/).
#
#   scripts/soak.sh                 # 300 s schedule, random seed (printed)
#   ZK_SOAK_SECS=900 scripts/soak.sh
#   ZK_FAULT_SEED=1234 scripts/soak.sh   # replay a schedule
set -euo pipefail
cd "$(dirname "$0")/.."
export ZK_SOAK=1
export ZK_SOAK_SECS="${ZK_SOAK_SECS:-300}"
cargo test --test fault_histories -- --test-threads=1 --nocapture 2>&1 |
    grep -v 'SESSION|' | grep -E -v '^\s*$'

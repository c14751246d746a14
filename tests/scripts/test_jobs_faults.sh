#!/usr/bin/env bash
# The fault campaign (tests/faults/campaign.py) over a fixed set of seeds:
# random schedules of kill -9, SIGTERM/SIGINT/SIGUSR1, a second writer, a
# full disk, damaged files and a replaced teacher on a tiny ar -> k1 -> k2
# chain, each followed by invariants checked independently of the trainer.
# Seeds after the first line are regressions: each once found a bug (see the
# commit that added it). bench/faults.sh runs thousands of new seeds.
# Needs root for the full-disk tmpfs (CI runs as root); without it the
# campaign counts one failure, it never skips.
set -u
cd "$(dirname "$0")/../.."
SEEDS="$(seq -s, 1 50),101,111,118,139,1001,1035,1071,5015,5037"
exec python3 tests/faults/campaign.py --kf "${KF_BIN:-bin/kf}" --seeds "$SEEDS"

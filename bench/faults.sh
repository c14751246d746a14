#!/usr/bin/env bash
# bench/faults.sh [N [FIRST]] — the fault campaign over N random schedules
# (default 2000), seeds FIRST.. (default: from the clock). Prints each
# schedule and violation, then schedules run, faults injected by kind and
# violations by invariant; `python3 tests/faults/campaign.py --seed S -v`
# replays one. About 2 s per schedule on 2 loaded cores.
set -u
cd "$(dirname "$0")/.."
N=${1:-2000}
FIRST=${2:+--first $2}
exec python3 tests/faults/campaign.py --kf "${KF_BIN:-bin/kf}" --schedules "$N" $FIRST

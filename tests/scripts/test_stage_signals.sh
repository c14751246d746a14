#!/usr/bin/env bash
# slurm/stage.sbatch's signal handling, outside Slurm, against a fake trainer
# (KF_BIN) that takes 0-2 s to install its handlers: seeded random schedules
# of USR1/TERM (one to four, to the wrapper alone as --signal=B does, or to
# the trainer too once it has handlers, as slurmstepd does), before the
# trainer starts or up to 1.2 s after, with the trainer taking 0-1.2 s to
# end after its first signal and ending with 75, 0 or 1; some cases with
# the machine loaded by process churn (signals and exits then land in the
# wrapper's every instant, as on a busy node), some with no FIFO for the
# wrapper's naps (TMPDIR unwritable).
# Invariants, for every schedule: no signal kills the trainer (the wrapper
# holds one back until the trainer handles it); the wrapper reports the
# trainer's own exit status (not the 128 + signal of a wait cut short, nor
# bash's -1 for a status it lost) and exits by it (75 with a checkpoint;
# otherwise not complete: the trainer's code, 1 for 0). The seed is printed;
# KF_TEST_SEED=N replays a draw of the schedules (their timing is the
# machine's).
set -u
cd "$(dirname "$0")/../.."
. tests/scripts/lib_check.sh
T=$(mktemp -d /tmp/kf-test-stagesig.XXXXXX)
trap '[ -n "${KF_TEST_KEEP:-}" ] || rm -rf "$T"' EXIT
seed_random 20261130

cat > "$T/fake-kf" <<'FAKE'
#!/usr/bin/env python3
# `jobs check`: never complete; `train`: after $FAKE/startup s installs
# handlers that only set a flag, as the trainer's do; then runs until a
# signal, and ends $FAKE/delay s after the first with $FAKE/code
import os, signal, sys, time
fake = os.environ["FAKE"]
def num(name): return float(open(f"{fake}/{name}").read())
if sys.argv[1] == "jobs": sys.exit(1)
time.sleep(num("startup"))
got = []
for s in (signal.SIGTERM, signal.SIGUSR1): signal.signal(s, lambda sig, frame: got.append(sig))
open(f"{fake}/pid", "w").write(str(os.getpid()))
end = time.monotonic() + 30
while not got and time.monotonic() < end: time.sleep(0.01)
code = int(num("code")) if got else 3
time.sleep(num("delay"))
open(f"{fake}/exited", "w").write(str(code))
# the trainer's handlers stay to the end; Python's exit would put back the
# default actions, and a signal forwarded then would kill it
for s in (signal.SIGTERM, signal.SIGUSR1): signal.signal(s, signal.SIG_IGN)
os._exit(code)
FAKE
chmod +x "$T/fake-kf"

# random_tenths MAX VAR: VAR = 0.0 .. MAX/10 seconds (no subshell: bash
# reseeds RANDOM in one, and the draw would not replay)
random_tenths() { local t=$((RANDOM % ($1 + 1))); printf -v "$2" '%d.%d' $((t / 10)) $((t % 10)); }

for i in $(seq 16); do
  F=$T/case$i; mkdir -p "$F"
  codes=(75 0 1); code=${codes[RANDOM % 3]}; echo "$code" > "$F/code"
  random_tenths 12 delay; echo "$delay" > "$F/delay"
  random_tenths 20 startup; echo "$startup" > "$F/startup"
  early=$((RANDOM % 3 == 0))          # a signal before the trainer runs
  random_tenths 12 after              # else this long after it started
  nsig=$((RANDOM % 4 + 1)); both=$((RANDOM % 2))
  load=$((RANDOM % 2)); nofifo=$((RANDOM % 4 == 0))
  sigs=(); for _ in $(seq $nsig); do s=(TERM USR1); sigs+=("${s[RANDOM % 2]}"); done
  what="case $i: handlers after $startup s, exit ${code} $delay s after a signal; ${sigs[*]} to the wrapper$([ $both = 1 ] && echo ' and the trainer'), $([ $early = 1 ] && echo 'before the trainer ran' || echo "$after s into it")$([ $load = 1 ] && echo ', under churn')$([ $nofifo = 1 ] && echo ', no FIFO')"
  [ $load = 1 ] && churn_start
  tmp=$T; [ $nofifo = 1 ] && tmp=$T/absent
  FAKE=$F KF_BIN=$T/fake-kf TMPDIR=$tmp bash slurm/stage.sbatch "$F/run" ar > "$F/log" 2>&1 &
  wpid=$!
  if [ $early = 1 ]; then
    wait_until 20 grep -q "start on" "$F/log"
  else
    wait_until 20 grep -q "running (pid" "$F/log"; sleep "$after"
  fi
  for s in "${sigs[@]}"; do
    kill -"$s" $wpid 2>/dev/null
    [ $both = 1 ] && [ -s "$F/pid" ] && kill -"$s" "$(cat "$F/pid")" 2>/dev/null
  done
  wait $wpid; wrc=$?
  churn_stop
  got=$(sed -n 's/.*trainer exited with \(-\{0,1\}[0-9]*\).*/\1/p' "$F/log")
  check "$what: the wrapper reports the trainer's exit $(cat "$F/exited" 2>/dev/null) (got '$got')" \
    bash -c '[ -n "$1" ] && [ "$1" = "$2" ]' _ "$got" "$(cat "$F/exited" 2>/dev/null)"
  want=$code; [ "$code" = 0 ] && want=1
  check "$what: the wrapper exits $want (got $wrc)" [ "$wrc" = "$want" ]
done
finish

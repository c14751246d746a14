#!/usr/bin/env python3
"""tests/faults/campaign.py — a randomized fault campaign over `kf jobs run`.

In the spirit of FoundationDB's simulation testing and Jepsen: each schedule,
drawn from one integer seed, runs a tiny three-stage chain (ar -> k1 -> k2,
STEPS steps each, a checkpoint every CKPT_EVERY) through a few episodes of
`kf jobs run`, injecting faults while it trains (kill -9, SIGTERM, SIGINT,
SIGUSR1 to the runner, its trainer or the whole process group; a second
concurrent `kf jobs run`; a full disk; `kf import --force` of a teacher) and
between episodes (a flipped byte or a truncation in a random file of the run
directory; `kf import --force`). A last fault-free run must finish, or refuse
naming a file the campaign damaged. Faults that fire during training are
keyed to the trainer's progress lines ("STAGE: step N/M") plus a delay of a
few milliseconds, so `--seed S` replays a schedule's faults at the same steps
(process timing on a loaded machine still moves a fault by a step or so).

The invariants are checked by this file alone, never by asking the trainer:
a checkpoint is good when its bytes are those of the same step of a
reference run made once per campaign (uninterrupted, every checkpoint kept),
and a process is alive when /proc says so.
  finish      the last run exits 0, or non-zero naming a damaged file; advice it
              gives (run again, remove a damaged directory) leads to a finish
  bitwise     every stage's final weights are the reference run's bytes (the
              reference with the same teacher imported, when an import succeeded);
              a rerun of the finished run changes nothing
  progress    an interruption loses at most CKPT_EVERY steps (none after a
              SIGTERM/SIGINT/SIGUSR1 that the trainer saw), and a resume starts
              at the newest good checkpoint
  status      `kf jobs status` never says running when no process holds the run
  retention   no good checkpoint is deleted while a corrupt one is kept, the
              last good one never, and ckpt/latest names a good checkpoint
  one-writer  two runners' trainers never print steps of one stage in
              overlapping spans; a refused second writer names the holder's pid
  log         a finished stage's log.jsonl parses and holds every step once, in order
  outside     nothing is written outside the run directory (cwd, TMPDIR, HOME,
              the shards and the config keep their bytes)

Usage: campaign.py [--seed S | --seeds S1,S2,... | --schedules N [--first S]]
                   [--kf BIN] [--work DIR] [--keep] [-v]
Prints each schedule (its seed first), each violation with its seed, and a
summary: schedules run, faults injected by kind, violations by invariant;
then "N passed, N failed" (checks, as tests/test.h counts them).
Exit 0 when no invariant was violated.
"""
import argparse
import errno
import hashlib
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

STAGES = ["ar", "k1", "k2"]
TEACHERS = ["ar", "k1"]  # the stages another one learns from (import targets)
STEPS = 24
CKPT_EVERY = 4
REF_STEP = 12
# references checkpoint every step and keep them all: a preemption checkpoints
# at any step, and its bytes must be those of the same step here
REF_KEEP = ["defaults.keep_checkpoints=1000", "defaults.checkpoint_every=1"]  # the replacement teacher: the reference's EMA weights at this step
TIMEOUT_S = 120  # one runner; a loaded machine is slow, not broken
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

CONFIG = """name: faults
data: {{train: {data}, valid: {data}}}
model: {{hidden: 16, heads: 2, blocks: 1, vocab: 30, seq_len: 16}}
defaults: {{batch: 4, lr: 3.0e-3, ema: 0.9, checkpoint_every: {every}, keep_checkpoints: 2,
           log_every: 1, eval_batches: 1, precision: [{{mode: fp32}}]}}
stages:
  - {{name: ar, kind: ar, steps: {steps}}}
  - {{name: k1, kind: distill_ar, teacher: ar, init: ar, k: 1, steps: {steps}, tau: [0.5, 1.0]}}
  - {{name: k2, kind: self_forcing, teacher: k1, k: 2, steps: {steps}, tau: [0.5, 1.0]}}
resources: {{backend: cpu, ranks: 1, collective_timeout: 60}}
"""

# advice in a refusal that an operator follows
ADVICE_ROUNDS = 3
REMOVE_RE = re.compile(r"remove (/\S+?)[,;:]? ")
AGAIN_RE = re.compile(r"run the same command again|rerun|run it again", re.I)
# a refusal because another writer holds the run; "lock" as a word, not inside
# "block" (a YAML parse error of a flipped run.yaml says "block collection")
REFUSAL_RE = re.compile(r"\block|held by|holder|in use|busy", re.I)
STEP_RE = re.compile(r"kf: (\w+): step (\d+)/(\d+) ")


def sha(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def file_norm_sha(path, config_hash):
    """sha256 of a checkpoint file. In state.yaml the run's own config_hash is
    blanked (the references' checkpoint_every and keep_checkpoints are in the
    hash), so a damaged hash still differs, and its last line, the sha256 of
    the bytes before it, is checked here and dropped."""
    with open(path, "rb") as f:
        data = f.read()
    if os.path.basename(path) == "state.yaml":
        m = re.search(rb'\nstate_sha256: "([0-9a-f]{64})"\n$', data)
        if m:
            body = data[:m.start() + 1]
            if hashlib.sha256(body).hexdigest() != m.group(1).decode():
                return "state.yaml does not match its state_sha256"
            data = body
        data = data.replace(b'config_hash: "%s"' % config_hash.encode(), b'config_hash: ""')
    return hashlib.sha256(data).hexdigest()


def run_hash(run):
    """The config sha256 on run.yaml's first line ("" when unreadable)."""
    try:
        with open(os.path.join(run, "run.yaml"), errors="replace") as f:
            m = re.match(r"# kf run config sha256: ([0-9a-f]{64})$", f.readline().strip())
    except OSError:
        return ""
    return m.group(1) if m else ""


def tree_sums(root):
    out = {}
    for d, _, files in os.walk(root):
        for n in files:
            p = os.path.join(d, n)
            if os.path.isfile(p) and not os.path.islink(p):
                out[os.path.relpath(p, root)] = sha(p)
    return out


def procs_with(needle):
    """pid -> argv of every live process whose command line contains needle."""
    out = {}
    for e in os.listdir("/proc"):
        if not e.isdigit():
            continue
        try:
            with open("/proc/%s/cmdline" % e, "rb") as f:
                argv = f.read().split(b"\0")
            with open("/proc/%s/stat" % e) as f:
                st = f.read()
        except OSError:
            continue
        if st[st.rfind(")") + 2] == "Z":
            continue
        args = [a.decode(errors="replace") for a in argv if a]
        if any(needle in a for a in args):
            out[int(e)] = args
    return out


def children(pid):
    out = []
    for e in os.listdir("/proc"):
        if not e.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % e) as f:
                st = f.read()
        except OSError:
            continue
        if int(st[st.rfind(")") + 2:].split()[1]) == pid:
            out.append(int(e))
    return out


def stage_of(argv):
    return argv[argv.index("--stage") + 1] if "train" in argv and "--stage" in argv else None


# ---------------------------------------------------------------- schedules

FAULT_KINDS_DURING = ["kill9", "term", "int", "usr1", "writer2", "fulldisk", "import"]


def make_schedule(seed, disk_ok):
    """Everything random about a schedule, drawn up front from its seed."""
    r = random.Random(seed)
    s = {"seed": seed, "keep": r.choice([1, 2, 3]), "episodes": []}
    imported = False
    for i in range(r.randint(1, 4)):
        gap, during = [], []
        if i > 0:
            for _ in range(r.choice([0, 1, 1, 2])):
                if not imported and r.random() < 0.15:
                    gap.append({"kind": "import", "stage": r.choice(TEACHERS)})
                    imported = True
                else:
                    gap.append({"kind": r.choice(["flip", "truncate"]), "pick": r.random(),
                                "at": r.random()})
        for _ in range(r.choice([0, 1, 1, 1, 2])):
            kinds = [k for k in FAULT_KINDS_DURING if disk_ok or k != "fulldisk"]
            kind = r.choice(kinds)
            if kind == "import" and imported:
                kind = "kill9"
            f = {"kind": kind}
            if r.random() < 0.15:
                f["after_ms"] = r.randint(0, 400)  # since the runner started
            else:
                f["frac"] = r.random()  # of the chain's steps left when the run starts
                f["delay_ms"] = r.choice([0, 0, 1, 2, 3, 5, 10])
            if kind in ("kill9", "term", "int", "usr1"):
                f["target"] = r.choice(["runner", "trainer", "trainer", "group"])
            if kind == "fulldisk":
                f["free"] = r.choice([0, 4096, 16384, 65536, 200000])
            if kind == "import":
                f["stage"] = r.choice(TEACHERS)
                imported = True
            during.append(f)
        s["episodes"].append({"gap": gap, "during": during})
    return s


def describe(s):
    lines = ["schedule seed=%d keep_checkpoints=%d" % (s["seed"], s["keep"])]
    for i, e in enumerate(s["episodes"]):
        for g in e["gap"]:
            lines.append("  before run %d: %s" % (i + 1, fault_text(g)))
        lines.append("  run %d: kf jobs run%s" % (i + 1, "".join(
            "; " + fault_text(f) for f in e["during"])))
    lines.append("  then: kf jobs run without faults, twice")
    return "\n".join(lines)


def fault_text(f):
    k = f["kind"]
    if k in ("flip", "truncate"):
        return "%s a run-directory file (pick %.3f, at %.3f)" % (k, f["pick"], f["at"])
    what = {"kill9": "kill -9", "term": "SIGTERM", "int": "SIGINT", "usr1": "SIGUSR1",
            "writer2": "second kf jobs run", "fulldisk": "full disk (%s bytes free)" % f.get("free"),
            "import": "kf import --force %s" % f.get("stage")}[k]
    if "target" in f:
        what += " to " + f["target"]
    if "after_ms" in f:
        return what + " %d ms after start" % f["after_ms"]
    if "pos" in f:
        return what + " at %s step %d +%d ms" % (STAGES[f["pos"] // STEPS], f["pos"] % STEPS + 1,
                                                f["delay_ms"])
    if "frac" in f:
        return what + " %.0f%% into the steps left +%d ms" % (100 * f["frac"], f["delay_ms"])
    return what


# ---------------------------------------------------------------- the campaign

class Campaign:
    def __init__(self, kf, work, verbose):
        self.kf, self.work, self.verbose = kf, work, verbose
        self.checks = self.failed = 0
        self.faults = {}
        self.violations = {}
        self.schedules = 0
        self.data = os.path.join(work, "data")
        self.cfg = os.path.join(work, "faults.yaml")
        self.cwd = os.path.join(work, "cwd")
        self.tmp = os.path.join(work, "tmp")
        self.home = os.path.join(work, "home")
        self.mnt = os.path.join(work, "mnt")
        for d in (self.cwd, self.tmp, self.home, self.mnt):
            os.makedirs(d, exist_ok=True)
        self.env = dict(os.environ, OMP_NUM_THREADS="1", TMPDIR=self.tmp, HOME=self.home)
        subprocess.run(["bash", "-c", '. tests/scripts/lib_trainer.sh && trainer_setup "$1"',
                        "_", self.data], cwd=REPO, check=True, stdout=subprocess.DEVNULL)
        with open(self.cfg, "w") as f:
            f.write(CONFIG.format(data=os.path.join(self.data, "shards"), every=CKPT_EVERY,
                                  steps=STEPS))
        # full disks need a small file system of our own: a tmpfs (root or CAP_SYS_ADMIN)
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "kf-faults", self.mnt],
                           capture_output=True, text=True)
        self.disk_ok = r.returncode == 0
        self.disk_why = r.stderr.strip()
        self.outside = tree_sums(self.data)
        self.outside[self.cfg] = sha(self.cfg)
        self.refs = {}
        self.make_references()

    def close(self):
        if self.disk_ok:
            subprocess.run(["umount", self.mnt])

    # ---- references: the chain uninterrupted, every checkpoint kept; and with each
    # teacher replaced by the reference's EMA weights at REF_STEP
    def make_references(self):
        base = os.path.join(self.work, "ref-none")
        self.kf_ok(["jobs", "run", self.cfg, "--run-dir", base, "--no-sample",
                    *REF_KEEP])
        self.replacement = {s: os.path.join(base, "stages", s, "ckpt", "step-%d" % REF_STEP,
                                            "ema.safetensors") for s in TEACHERS}
        self.refs["none"] = self.index(base)
        for s in TEACHERS:
            d = os.path.join(self.work, "ref-" + s)
            os.makedirs(os.path.join(d, "stages"))
            shutil.copy(os.path.join(base, "run.yaml"), d)
            for up in STAGES[:STAGES.index(s)]:
                shutil.copytree(os.path.join(base, "stages", up), os.path.join(d, "stages", up))
            self.kf_ok(["import", self.replacement[s], "--run-dir", d, "--stage", s, "--force"])
            self.kf_ok(["jobs", "run", self.cfg, "--run-dir", d, "--no-sample",
                        *REF_KEEP])
            self.refs[s] = self.index(d)

    def kf_ok(self, args):
        r = subprocess.run([self.kf] + args, cwd=self.cwd, env=self.env, capture_output=True,
                           text=True)
        if r.returncode:
            sys.exit("campaign set-up: kf %s failed (exit %d):\n%s" % (" ".join(args),
                                                                       r.returncode, r.stderr[-2000:]))

    @staticmethod
    def index(run):
        """stage -> {"final": sha, step: {file: normalized sha}}"""
        out, h = {}, run_hash(run)
        for s in STAGES:
            d = os.path.join(run, "stages", s)
            out[s] = {"final": sha(os.path.join(d, "final", "model.safetensors"))}
            ck = os.path.join(d, "ckpt")
            for n in os.listdir(ck) if os.path.isdir(ck) else []:
                if re.fullmatch(r"step-\d+", n):
                    out[s][int(n[5:])] = {f: file_norm_sha(os.path.join(ck, n, f), h)
                                          for f in os.listdir(os.path.join(ck, n))}
        return out

    # ---- bookkeeping
    def check(self, ok, seed, invariant, detail):
        self.checks += 1
        if not ok:
            self.failed += 1
            self.violations.setdefault(invariant, []).append(seed)
            print("VIOLATION seed=%d %s: %s" % (seed, invariant, detail), flush=True)
        return ok

    def injected(self, kind):
        self.faults[kind] = self.faults.get(kind, 0) + 1

    def log(self, msg):
        if self.verbose:
            print("    " + msg, flush=True)

    # ---- one schedule
    def run_schedule(self, seed):
        s = make_schedule(seed, self.disk_ok)
        print(describe(s), flush=True)
        self.schedules += 1
        st = Schedule(self, s)
        try:
            st.play()
        finally:
            st.cleanup()


class Runner:
    """One `kf jobs run` in its own process group, its output read by a thread
    that fires the faults keyed to progress lines."""

    def __init__(self, sched, faults, name):
        self.sched, self.name = sched, name
        self.lines, self.first, self.reached = [], {}, {}
        self.span = {}  # stage -> [first, last] time one of its step lines was read
        self.faults = list(faults)
        self.proc = subprocess.Popen(sched.runner_argv(), cwd=sched.c.cwd, env=sched.c.env,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        self.t0 = time.monotonic()
        self.reader = threading.Thread(target=self.read, daemon=True)
        self.reader.start()
        self.timers = [threading.Timer(f["after_ms"] / 1000, sched.fire, (f, self))
                       for f in self.faults if "after_ms" in f]
        for t in self.timers:
            t.start()

    def read(self):
        for raw in self.proc.stdout:
            line = raw.decode(errors="replace").rstrip("\n")
            self.lines.append(line)
            m = STEP_RE.search(line)
            if not m or m.group(1) not in STAGES:
                continue
            stage, step = m.group(1), int(m.group(2))
            now = time.monotonic()
            self.span.setdefault(stage, [now, now])[1] = now
            self.first.setdefault(stage, step)
            self.reached[stage] = max(self.reached.get(stage, 0), step)
            pos = STAGES.index(stage) * STEPS + step - 1
            for f in self.faults:
                if "pos" in f and not f.get("fired") and pos >= f["pos"]:
                    f["fired"] = True
                    time.sleep(f["delay_ms"] / 1000)
                    self.sched.fire(f, self)

    def wait(self):
        try:
            rc = self.proc.wait(TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            rc = self.proc.wait()
            self.sched.violate("finish", "%s hung for %d s" % (self.name, TIMEOUT_S))
        self.reader.join(TIMEOUT_S)
        for t in self.timers:
            t.cancel()
        return rc

    def output(self):
        return "\n".join(self.lines)


class Schedule:
    def __init__(self, c, s):
        self.c, self.s, self.seed = c, s, s["seed"]
        self.run = os.path.join(c.mnt if c.disk_ok else c.work, "run-%d" % self.seed)
        shutil.rmtree(self.run, ignore_errors=True)
        self.damaged = {}  # run-relative path -> sha after the damage
        self.imported = None  # the teacher whose import succeeded
        self.lock = threading.Lock()
        self.episode_faults = []
        self.extra = []  # second writers, imports started during an episode
        self.full = False
        self.closed = False
        self.config_hash = ""
        self.pids_seen = set()

    def violate(self, invariant, detail):
        self.c.check(False, self.seed, invariant, detail)

    def runner_argv(self):
        return [self.c.kf, "jobs", "run", self.c.cfg, "--run-dir", self.run, "--no-sample",
                "defaults.keep_checkpoints=%d" % self.s["keep"]]

    def cleanup(self):
        self.unfill()
        for pid in procs_with(self.run):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        self.quiet()
        shutil.rmtree(self.run, ignore_errors=True)

    # ---- the run directory as this file sees it
    def ckpts(self, stage):
        """step -> good (bytes of the reference that applies) for each ckpt/step-N."""
        d = os.path.join(self.run, "stages", stage, "ckpt")
        out = {}
        for n in os.listdir(d) if os.path.isdir(d) else []:
            if not re.fullmatch(r"step-\d+", n) or not os.path.isdir(os.path.join(d, n)):
                continue
            step = int(n[5:])
            refs = [self.c.refs["none"]] + ([self.c.refs[self.imported]] if self.imported else [])
            try:
                have = {f: file_norm_sha(os.path.join(d, n, f), self.hash())
                        for f in os.listdir(os.path.join(d, n))}
            except OSError:
                have = None
            if step == 0:
                # a preemption before the first step: the references checkpoint
                # from step 1, so no bytes to hold it to; good when it has their
                # files and none this campaign damaged (what a resume from it
                # makes, bitwise judges)
                rel = "stages/%s/ckpt/%s/" % (stage, n)
                out[step] = have is not None and not any(
                    x.startswith(rel) for x in self.still_damaged()) and any(
                    r[stage].get(1) and set(have) == set(r[stage][1]) for r in refs)
                continue
            out[step] = any(have == r[stage].get(step) for r in refs)
        return out

    def retired(self, stage, step):
        """Whether ckpt/step-N was kept in stages/STAGE/stale/*/ (a stage
        trained again after its teacher changed keeps what it had there)."""
        d = os.path.join(self.run, "stages", stage, "stale")
        return any(os.path.isdir(os.path.join(d, n, "ckpt", "step-%d" % step))
                   for n in (os.listdir(d) if os.path.isdir(d) else []))

    def hash(self):
        """The run's config sha256, read from run.yaml before any damage."""
        if not self.config_hash and "run.yaml" not in self.damaged:
            self.config_hash = run_hash(self.run)
        return self.config_hash

    def newest_good(self, stage):
        good = [k for k, v in self.ckpts(stage).items() if v]
        return max(good) if good else 0

    def complete(self, stage):
        f = os.path.join(self.run, "stages", stage, "final")
        return os.path.exists(os.path.join(f, "DONE")) and os.path.exists(
            os.path.join(f, "model.safetensors"))

    def still_damaged(self):
        out = []
        for rel, h in self.damaged.items():
            p = os.path.join(self.run, rel)
            if os.path.isfile(p) and sha(p) == h:
                out.append(rel)
        return out

    # ---- faults
    def fire(self, f, runner):
        with self.lock:
            k = f["kind"]
            if self.closed or ("after_ms" in f and runner.proc.poll() is not None):
                f["fired"] = "missed"  # its run ended first
                return
            f["fired"] = True
            if k in ("kill9", "term", "int", "usr1"):
                sig = {"kill9": signal.SIGKILL, "term": signal.SIGTERM, "int": signal.SIGINT,
                       "usr1": signal.SIGUSR1}[k]
                pid = runner.proc.pid
                try:
                    if f["target"] == "group":
                        os.killpg(pid, sig)
                    elif f["target"] == "runner":
                        os.kill(pid, sig)
                    else:
                        kids = children(pid)
                        if not kids:
                            self.c.log("%s: no trainer alive, not sent" % fault_text(f))
                            f["fired"] = "missed"
                            return
                        os.kill(kids[0], sig)
                        f["trainer_seen"] = True
                except ProcessLookupError:
                    f["fired"] = "missed"
                    return
                if f["target"] != "runner" or children(pid):
                    f["trainer_seen"] = True
            elif k == "writer2":
                r = Runner(self, [], "second kf jobs run")
                self.pids_seen.add(r.proc.pid)  # it may hold the run briefly, unpolled
                self.extra.append(r)
            elif k == "fulldisk":
                self.fill(f["free"])
            elif k == "import":
                self.extra.append(self.start_import(f["stage"]))
            self.c.injected(k)
            self.c.log("fired: %s" % fault_text(f))

    def start_import(self, stage):
        p = subprocess.Popen([self.c.kf, "import", self.c.replacement[stage], "--run-dir",
                              self.run, "--stage", stage, "--force"], cwd=self.c.cwd,
                             env=self.c.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        p.stage = stage
        self.pids_seen.add(p.pid)  # a holder named by a refusal may be this short-lived one
        return p

    def fill(self, free):
        """Takes every free byte of the tmpfs, then gives FREE back."""
        path = os.path.join(self.c.mnt, "fill")
        self.full = True
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            while True:
                os.write(fd, b"\0" * 65536)
        except OSError as e:
            if e.errno != errno.ENOSPC:
                raise
        finally:
            os.close(fd)
        os.truncate(path, max(0, os.path.getsize(path) - free))

    def unfill(self):
        if self.full:
            os.remove(os.path.join(self.c.mnt, "fill"))
            self.full = False

    def damage(self, g):
        files = []
        for d, _, names in os.walk(self.run):
            files += [os.path.join(d, n) for n in names]
        files = sorted(p for p in files if os.path.isfile(p) and not os.path.islink(p)
                       and os.path.getsize(p) > 0)
        if not files:
            return
        p = files[int(g["pick"] * len(files))]
        rel = os.path.relpath(p, self.run)
        with open(p, "r+b") as f:
            data = f.read()
            at = int(g["at"] * len(data))
            if g["kind"] == "flip":
                f.seek(at)
                f.write(bytes([data[at] ^ 0x5a]))
            else:
                f.truncate(at)
        self.damaged[rel] = sha(p)
        self.c.injected(g["kind"])
        print("    %s %s at byte %d of %d" % (g["kind"], rel, at, len(data)), flush=True)

    # ---- episodes
    def quiet(self):
        """Waits until no process names the run directory (an orphaned trainer
        of a killed runner finishes its stage)."""
        end = time.monotonic() + TIMEOUT_S
        while procs_with(self.run):
            if time.monotonic() > end:
                self.violate("finish", "processes still alive %d s after their runner: %s" %
                             (TIMEOUT_S, procs_with(self.run)))
                for pid in procs_with(self.run):
                    os.kill(pid, signal.SIGKILL)
                break
            time.sleep(0.02)

    def snapshot(self):
        return {s: (self.ckpts(s), self.complete(s)) for s in STAGES}

    def play(self):
        for i, e in enumerate(self.s["episodes"]):
            for g in e["gap"]:
                if g["kind"] == "import":
                    p = self.start_import(g["stage"])
                    out = p.communicate()[0].decode(errors="replace")
                    self.c.injected("import")
                    self.after_import(p, out)
                elif os.path.isdir(self.run):
                    self.damage(g)
            self.episode(e["during"], "run %d" % (i + 1))
        self.finish()
        self.check_outside()

    def finish(self):
        """The last runs, without faults. An operator follows the advice of a
        refusal (run the same command again; remove a damaged directory, or
        import again what was imported) up to ADVICE_ROUNDS times: advice that
        does not lead to a finished run is a violation, and a refusal without
        advice must name a damaged file."""
        for rnd in range(ADVICE_ROUNDS + 1):
            rc, out = self.episode([], "last run" if rnd == 0 else "run after advice %d" % rnd)
            if rc == 0:
                self.check_finished()
                before = {s: sha(self.final(s)) for s in STAGES}
                rc2, out2 = self.episode([], "rerun")
                self.c.check(rc2 == 0 and all(sha(self.final(s)) == before[s] for s in STAGES),
                             self.seed, "bitwise", "a rerun of the finished run exits %d or "
                             "changes final weights:\n%s" % (rc2, tail(out2)))
                return
            self.c.log("its output ends:\n" + tail(out, 4))
            remove = REMOVE_RE.search(out)
            if rnd == ADVICE_ROUNDS:
                self.violate("finish", "the advice given did not finish the run in %d rounds; "
                             "the last run exits %d:\n%s" % (ADVICE_ROUNDS, rc, tail(out)))
            elif remove and os.path.abspath(remove.group(1)).startswith(self.run + "/"):
                path = os.path.abspath(remove.group(1))
                stage = os.path.relpath(path, self.run).split("/")
                if stage[0] == "stages" and stage[1:] == [self.imported, "final"]:
                    p = self.start_import(self.imported)
                    p.communicate()
                    self.c.log("advice: imported %s again (exit %d)" % (self.imported, p.returncode))
                else:
                    shutil.rmtree(path, ignore_errors=True)
                    self.c.log("advice: removed %s" % path)
            elif AGAIN_RE.search(out):
                self.c.log("advice: run the same command again")
            else:
                bad = self.still_damaged()
                named = [r for r in bad if r in out or os.path.dirname(r) in out]
                self.c.check(bool(named), self.seed, "finish",
                             "the last run exits %d naming no damaged file (damaged: %s):\n%s" %
                             (rc, bad or "none", tail(out)))
                return

    def final(self, stage):
        return os.path.join(self.run, "stages", stage, "final", "model.safetensors")

    def after_import(self, p, out):
        if p.returncode == 0:
            self.imported = p.stage
            self.c.log("import of %s succeeded" % p.stage)
        else:
            self.check_holder("kf import --force", out)

    def episode(self, faults, name):
        before = self.snapshot()
        # where the chain stands: faults keyed to a fraction of the steps left
        cur = len(STAGES) * STEPS
        for i, st in enumerate(STAGES):
            if not before[st][1]:
                cur = i * STEPS + max([k for k, v in before[st][0].items() if v] or [0])
                break
        for f in faults:
            f.pop("fired", None)
            if "frac" in f:
                f["pos"] = cur + int(f["frac"] * (len(STAGES) * STEPS - cur))
        self.extra, self.pids_seen, self.closed = [], set(), False
        runner = Runner(self, faults, name)
        self.pids_seen.add(runner.proc.pid)
        stop = threading.Event()
        watcher = threading.Thread(target=self.watch_writers, args=(stop,), daemon=True)
        watcher.start()
        rc = runner.wait()
        with self.lock:
            self.closed = True
        for x in self.extra:
            if isinstance(x, Runner):
                x.wait()
            else:
                try:
                    x.wait(TIMEOUT_S)
                except subprocess.TimeoutExpired:
                    x.kill()
                    self.violate("finish", "kf import hung")
        self.quiet()
        stop.set()
        watcher.join()
        self.unfill()
        out = runner.output()
        self.c.log("%s: exit %d" % (name, rc))
        for x in self.extra:
            if isinstance(x, Runner):
                rc2 = x.proc.returncode
                o2 = x.output()
                if rc2 != 0 and not x.reached:
                    self.check_holder("the second kf jobs run", o2)
            else:
                self.after_import(x, x.stdout.read().decode(errors="replace"))
        # two runners' trainers printing steps of one stage in overlapping spans
        for x in self.extra:
            if isinstance(x, Runner):
                for st in set(x.span) & set(runner.span):
                    a, b = runner.span[st], x.span[st]
                    self.c.check(a[1] < b[0] or b[1] < a[0], self.seed, "one-writer",
                                 "two trainers trained stage %s at once" % st)
        self.check_quiescent(before, runner, faults, rc)
        return rc, out

    def check_holder(self, who, out):
        """A writer refused because another holds the run names the holder's pid."""
        if REFUSAL_RE.search(out):
            self.c.check(any(str(p) in out for p in self.pids_seen), self.seed, "one-writer",
                         "%s refused naming no holder pid (%s):\n%s" %
                         (who, sorted(self.pids_seen), tail(out)))

    def watch_writers(self, stop):
        """Records every pid that names the run: a refusal must name one."""
        while not stop.is_set():
            self.pids_seen.update(procs_with(self.run))
            stop.wait(0.02 if self.extra else 0.05)

    # ---- invariants at rest
    def check_quiescent(self, before, runner, faults, rc):
        seed = self.seed
        # status: nothing holds the run now, so nothing may be running
        if os.path.exists(os.path.join(self.run, "run.yaml")):
            r = subprocess.run([self.c.kf, "jobs", "status", self.run, "--json"], cwd=self.c.cwd,
                               env=self.c.env, capture_output=True, text=True)
            if r.returncode == 0:
                try:
                    rows = json.loads(r.stdout)["stages"]
                    running = [x["name"] for x in rows if x.get("state") == "running"]
                except (ValueError, KeyError, TypeError):
                    running = ["(unparsable status --json: %s)" % r.stdout[:200]]
                self.c.check(not running, seed, "status",
                             "kf jobs status says running for %s with no process alive" % running)
        fired = [f for f in faults if f.get("fired") is True]
        graceful = (len(fired) == 1 and fired[0]["kind"] in ("term", "int", "usr1")
                    and fired[0].get("trainer_seen") and not self.extra)
        reached = dict(runner.reached)
        for x in self.extra:
            if isinstance(x, Runner):
                for k, v in x.reached.items():
                    reached[k] = max(v, reached.get(k, 0))
        for s in STAGES:
            old, was_complete = before[s]
            now = self.ckpts(s)
            rel = "stages/%s/ckpt" % s
            # retention
            corrupt = sorted(k for k, v in now.items() if not v)
            lost = sorted(k for k, v in old.items() if v and k not in now and
                          not self.retired(s, k))
            touched = s in reached
            if touched:
                self.c.check(not (corrupt and lost), seed, "retention",
                             "%s: good checkpoint(s) %s deleted while corrupt %s kept" %
                             (s, lost, corrupt))
                self.c.check(not (lost and not any(now.values())), seed,
                             "retention", "%s: every good checkpoint deleted (had %s)" %
                             (s, sorted(k for k, v in old.items() if v)))
                latest = os.path.join(self.run, rel, "latest")
                if os.path.exists(latest) and "%s/latest" % rel not in self.still_damaged():
                    with open(latest, errors="replace") as f:
                        name = f.read().strip()
                    m = re.fullmatch(r"step-(\d+)", name)
                    self.c.check(bool(m) and now.get(int(m.group(1))), seed, "retention",
                                 "%s: ckpt/latest names %r, not a good checkpoint (have %s)" %
                                 (s, name, sorted(now.items())))
            # progress: a resume starts at the newest good checkpoint ...
            if s in runner.first and not was_complete and not self.extra and \
                    not self.downstream_of_import(s):
                want = max([k for k, v in old.items() if v] or [0])
                self.c.check(runner.first[s] - 1 == want, seed, "progress",
                             "%s: resumed at step %d, the newest good checkpoint is step-%d (%s)" %
                             (s, runner.first[s] - 1, want, sorted(old.items())))
            # ... and an interruption loses at most checkpoint_every steps
            if touched and not self.complete(s) and not self.downstream_of_import(s):
                got = self.newest_good(s)
                r = reached[s]
                limit = r if graceful else r - CKPT_EVERY
                self.c.check(got >= limit, seed, "progress",
                             "%s: reached step %d, newest good checkpoint step-%d after %s "
                             "(runner exit %d)" % (s, r, got, [fault_text(f) for f in fired] or
                                                   "no fault", rc))

    def downstream_of_import(self, s):
        return self.imported is not None and STAGES.index(s) >= STAGES.index(self.imported)

    def check_finished(self):
        ref = self.c.refs[self.imported or "none"]
        for s in STAGES:
            ok = self.complete(s) and sha(self.final(s)) == ref[s]["final"]
            self.c.check(ok, self.seed, "bitwise",
                         "%s: final weights differ from the reference%s" %
                         (s, " (teacher %s imported)" % self.imported if self.imported else ""))
            logf = os.path.join(self.run, "stages", s, "log.jsonl")
            if s == self.imported or "stages/%s/log.jsonl" % s in self.damaged:
                continue
            steps, bad = [], []
            with open(logf, errors="replace") as f:
                for n, line in enumerate(f, 1):
                    try:
                        rec = json.loads(line)
                        if "loss" in rec:
                            steps.append(rec["step"])
                    except ValueError:
                        bad.append(n)
            # one history: a resume drops the records past its checkpoint
            missing = sorted(set(range(1, STEPS + 1)) - set(steps))
            twice = sorted({k for k in steps if steps.count(k) > 1})
            self.c.check(not bad and steps == list(range(1, STEPS + 1)), self.seed, "log",
                         "%s/log.jsonl: unparsable lines %s, steps missing %s, logged twice %s%s"
                         % (s, bad, missing, twice,
                            "" if steps == sorted(steps) else ", out of order"))

    def check_outside(self):
        c = self.c
        for d in (c.cwd, c.tmp, c.home):
            c.check(not os.listdir(d), self.seed, "outside", "%s holds %s" % (d, os.listdir(d)))
            for n in os.listdir(d):
                p = os.path.join(d, n)
                shutil.rmtree(p) if os.path.isdir(p) else os.remove(p)
        now = tree_sums(c.data)
        now[c.cfg] = sha(c.cfg)
        c.check(now == c.outside, self.seed, "outside", "the shards or the config changed")
        if c.disk_ok:
            extra = [n for n in os.listdir(c.mnt) if n != os.path.basename(self.run)]
            c.check(not extra, self.seed, "outside", "%s holds %s" % (c.mnt, extra))


def tail(text, n=12):
    return "\n".join("      | " + l for l in text.splitlines()[-n:])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, help="replay this one schedule")
    ap.add_argument("--seeds", help="comma-separated seeds (the fixed set of make test)")
    ap.add_argument("--schedules", type=int, default=1, help="run N schedules (seeds FIRST..)")
    ap.add_argument("--first", type=int, help="first seed of --schedules (default: from the clock)")
    ap.add_argument("--kf", default=os.path.join(REPO, "bin", "kf"))
    ap.add_argument("--work", help="working directory (default: a new one under /tmp)")
    ap.add_argument("--keep", action="store_true", help="keep the working directory")
    ap.add_argument("-v", "--verbose", action="store_true", help="print every fault and exit")
    a = ap.parse_args()
    if a.seed is not None:
        seeds = [a.seed]
    elif a.seeds:
        seeds = [int(x) for x in a.seeds.split(",") if x.strip()]
    else:
        first = a.first if a.first is not None else int(time.time()) % 1000000 * 1000
        seeds = list(range(first, first + a.schedules))
    # SIGTERM ends the campaign like Ctrl-C: its tmpfs is unmounted
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    work = a.work or tempfile.mkdtemp(prefix="kf-faults-")
    os.makedirs(work, exist_ok=True)
    t0 = time.monotonic()
    c = Campaign(os.path.abspath(a.kf), os.path.abspath(work), a.verbose)
    if not c.disk_ok:
        print("full-disk faults off: cannot mount a tmpfs at %s (root or CAP_SYS_ADMIN "
              "needed): %s" % (c.mnt, c.disk_why))
        c.check(False, -1, "setup", "full-disk faults need a tmpfs")
    try:
        for seed in seeds:
            c.run_schedule(seed)
    finally:  # also when stopped (Ctrl-C, SIGTERM): the summary of what ran
        c.close()
        if not a.keep:
            shutil.rmtree(work, ignore_errors=True)
        print("schedules run: %d in %.0f s" % (c.schedules, time.monotonic() - t0))
        print("faults injected: %s" % (", ".join("%s %d" % kv for kv in sorted(c.faults.items()))
                                       or "none"))
        print("violations: %s" % (", ".join("%s %d (seeds %s)" % (k, len(v), ",".join(
            str(x) for x in sorted(set(v))[:20])) for k, v in sorted(c.violations.items()))
            or "0"))
        print("%d passed, %d failed" % (c.checks - c.failed, c.failed), flush=True)
    return 1 if c.failed else 0


if __name__ == "__main__":
    sys.exit(main())

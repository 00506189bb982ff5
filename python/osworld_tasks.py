#!/usr/bin/env python3
"""Set up and grade OSWorld's own tasks on deskfarm, untouched.

For each task JSON of an OSWorld checkout (evaluation_examples/examples/
<domain>/<id>.json) this leases one episode of deskfarm's pool "osworld"
through the deskfarm provider (deskfarm_osworld), resets the VM in place,
plays the task's `config` steps one by one through OSWorld's own
SetupController against the episode's OSWorld port, then grades the untouched
state with OSWorld's own DesktopEnv.evaluate (its getters and metrics). No
agent acts, so a feasible task that scores above 0 "passes untouched": the
image's defaults already satisfy its grader.

A task whose setup (config or postconfig) reaches the internet, or whose
grader does, is classified without running as fault "network" (deskfarm's
guests have no route out). Every other failure is attributed:

  runner    an OSWorld import that Debian does not package (see MISSING);
  image     the guest lacks the program or file a step or getter names;
  deskfarm  one of deskfarm's routes answered an error for another reason;
  grader    OSWorld's getter or metric raised on the untouched state with
            no route failing;
  timeout   the task ran past --timeout.

OSWorld's third-party imports that Debian lacks (MISSING) are stood in for
by stub modules whose every use raises MissingModule, so the rest of
OSWorld imports and runs unchanged; nothing of OSWorld is rewritten.

Usage (the farm must serve pool "osworld"):

  python3 python/osworld_tasks.py --osworld /path/to/OSWorld \
      --out report.jsonl [--domain os --domain vlc] [--per-domain 3] [--task ID]

Writes one JSON line per task, then prints the per-domain table (Markdown).
Needs Debian's python3 packages only (scripts/setup-host.sh installs them).
"""

import argparse
import collections
import contextlib
import importlib.abc
import importlib.machinery
import json
import logging
import os
import re
import shlex
import signal
import sys
import threading
import time
import types
from urllib.parse import urlsplit

log = logging.getLogger("osworld_tasks")

# OSWorld's top-level imports (controllers, evaluators, DesktopEnv) that
# Debian bookworm packages under no name (apt-cache, December 2026).
# gymnasium only gives DesktopEnv its base class.
MISSING = ("playwright", "pydrive", "pptx", "rapidfuzz", "pdfplumber", "imagehash", "borb", "librosa",
           "formulas", "fastdtw", "easyocr", "gymnasium")

_URL = re.compile(r"https?://[^\s\"'<>\\]+")
_LOCAL_HOSTS = {"localhost", "127.0.0.1", "::1", "0.0.0.0"}
# Setup step types that reach the internet whatever their parameters.
_NETWORK_STEPS = {"googledrive", "login", "proxy"}


# ---- classification (no farm needed) --------------------------------------

def internet_urls(obj):
    """The http(s) URLs in obj (any JSON value) whose host is not local."""
    out = []
    for u in _URL.findall(json.dumps(obj)):
        host = (urlsplit(u).hostname or "").lower()
        if host and host not in _LOCAL_HOSTS:
            out.append(u)
    return out


def network_needs(task):
    """Where task reaches the internet: a list of {"where", "what"}, empty
    for a task that runs offline. "where" is config, postconfig or grader
    (the evaluator's result/expected getters)."""
    ev = task.get("evaluator", {})
    needs = []
    for where, steps in (("config", task.get("config", [])), ("postconfig", ev.get("postconfig", []))):
        for s in steps:
            if s.get("type") in _NETWORK_STEPS:
                needs.append({"where": where, "what": s["type"] + " step"})
            for u in internet_urls(s.get("parameters", {})):
                needs.append({"where": where, "what": u})
    for key in ("result", "expected"):
        for u in internet_urls(ev.get(key, {})):
            needs.append({"where": "grader", "what": u})
    return needs


def setup_offline(needs):
    """Whether a task with these network_needs sets up offline (its grader
    may still reach out)."""
    return all(n["where"] == "grader" for n in needs)


def feasible(task):
    func = task.get("evaluator", {}).get("func")
    return func != "infeasible" and func != ["infeasible"]


def step_program(step):
    """The program or file a setup step needs in the guest, or None: argv[0]
    of launch/execute/command (the first word of a shell string), the path
    of open."""
    p = step.get("parameters", {})
    if step.get("type") == "open":
        return p.get("path")
    if step.get("type") in ("launch", "execute", "command", "execute_with_verification"):
        cmd = p.get("command")
        if isinstance(cmd, str):
            try:
                cmd = shlex.split(cmd)
            except ValueError:
                cmd = cmd.split()
        return cmd[0] if cmd else None
    return None


class MissingModule(ImportError):
    """An OSWorld import Debian does not package was used."""

    def __init__(self, module):
        super().__init__("%s is not packaged by Debian; the runner stands a stub in for it" % module)
        self.module = module


class TaskTimeout(BaseException):
    """Raised by the per-task alarm. A BaseException, so that OSWorld's
    `except Exception` retry loops (getters retry 3 times, 5 s apart) do
    not swallow it and run on past the timeout."""


def attribute(exc, route_errors, missing_in_guest):
    """Whose fault a failed step or grading is. exc: the exception raised
    (or None); route_errors: (route, status) pairs deskfarm answered with an
    error meanwhile; missing_in_guest: the program/file the step names is
    absent from the guest (None when not probed)."""
    chain = []
    e = exc
    while e is not None and len(chain) < 10:
        chain.append(e)
        e = e.__cause__ or e.__context__
    if any(isinstance(e, MissingModule) for e in chain):
        return "runner"
    if any(isinstance(e, TaskTimeout) for e in chain):
        return "timeout"
    if missing_in_guest:
        return "image"
    if route_errors:
        return "deskfarm"
    return "grader"


def missing_module(exc):
    e = exc
    while e is not None:
        if isinstance(e, MissingModule):
            return e.module
        e = e.__cause__ or e.__context__
    return None


# ---- stubs for the imports Debian lacks -----------------------------------

class _MissingMeta(type):
    def __getattr__(cls, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _missing_class(cls._module, name)

    def __call__(cls, *a, **kw):
        raise MissingModule(cls._module)


def _missing_class(module, name):
    # A class, so `except TimeoutError`, subclassing and attribute chains
    # all work; calling it raises MissingModule.
    return _MissingMeta(name, (Exception,), {"_module": module})


class _Env:
    """Stands in for gymnasium.Env, DesktopEnv's base class (no behaviour)."""


class _StubModule(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _missing_class(self.__name__.split(".")[0], name)


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self, names):
        self.names = set(names)

    def find_spec(self, fullname, path, target=None):
        if fullname.split(".")[0] in self.names:
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        m = _StubModule(spec.name)
        m.__path__ = []
        if spec.name == "gymnasium":
            m.Env = _Env
        return m

    def exec_module(self, module):
        pass


def install_stubs():
    """Stub every MISSING module that does not import; return their names."""
    absent = []
    for name in MISSING:
        try:
            __import__(name)
        except ImportError:
            absent.append(name)
    if absent:
        sys.meta_path.append(_StubFinder(absent))
    return absent


# ---- deskfarm route errors, as OSWorld's requests calls see them ----------

class RouteErrors:
    """Records the non-2xx answers of the episode's OSWorld port (any
    requests call OSWorld makes goes through Session.send)."""

    def __init__(self):
        self.base = None  # "http://host:port"
        self.errors = []
        self._local = threading.local()

    def install(self):
        import requests
        orig = requests.Session.send
        rec = self

        def send(session, request, **kw):
            r = orig(session, request, **kw)
            if rec.base and request.url.startswith(rec.base) and r.status_code >= 400:
                rec.errors.append((urlsplit(request.url).path, r.status_code, r.text[:300]))
            return r

        requests.Session.send = send

    def take(self):
        out, self.errors = self.errors, []
        return out


# ---- the run ---------------------------------------------------------------

def load_tasks(osworld, domains=(), task_ids=()):
    root = os.path.join(osworld, "evaluation_examples", "examples")
    tasks = []
    for domain in sorted(os.listdir(root)):
        if domains and domain not in domains:
            continue
        for f in sorted(os.listdir(os.path.join(root, domain))):
            if not f.endswith(".json"):
                continue
            with open(os.path.join(root, domain, f)) as fh:
                t = json.load(fh)
            if task_ids and t["id"] not in task_ids:
                continue
            tasks.append((domain, t))
    return tasks


@contextlib.contextmanager
def deadline(seconds):
    def fire(signum, frame):
        raise TaskTimeout("task ran past %ds" % seconds)
    old = signal.signal(signal.SIGALRM, fire)
    signal.alarm(int(seconds))
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


class Runner:
    def __init__(self, env, routes, cache_dir):
        self.env = env
        self.routes = routes
        self.cache_dir = cache_dir

    def _in_guest(self, path):
        """Whether path (a program on PATH or a file) exists in the guest."""
        import requests
        q = '"$HOME"/' + shlex.quote(path[2:]) if path.startswith("~/") else shlex.quote(path)
        r = requests.post(self.env.controller.http_server + "/execute",
                          json={"command": "command -v %s >/dev/null || test -e %s" % (q, q), "shell": True},
                          timeout=60)
        return r.status_code == 200 and r.json().get("returncode") == 0

    def _steps(self, steps, phase, rec):
        """Play steps one at a time through OSWorld's SetupController; on
        the first that raises or meets a route error, record it and stop."""
        for i, step in enumerate(steps):
            rec["running"] = "%s step %d (%s)" % (phase, i + 1, step.get("type"))
            self.routes.take()
            exc = None
            try:
                ok = self.env.setup_controller.setup([step], False)
                if not ok:
                    exc = RuntimeError("SetupController.setup returned False (no answer from /terminal)")
            except Exception as e:  # noqa: BLE001 - recorded, then attributed
                exc = e
            errs = self.routes.take()
            if exc is None and not errs:
                continue
            prog = step_program(step)
            gone = None
            if prog and not isinstance(exc, TaskTimeout):
                try:
                    gone = not self._in_guest(prog)
                except Exception:  # noqa: BLE001
                    gone = None
            rec["failed_step"] = {"phase": phase, "n": i + 1, "type": step.get("type"),
                                  "parameters": step.get("parameters"),
                                  "error": repr(exc) if exc else None,
                                  "route_errors": errs, "missing_in_guest": prog if gone else None}
            rec["fault"] = attribute(exc, errs, gone)
            if rec["fault"] == "runner":
                rec["missing_module"] = missing_module(exc)
            return False
        return True

    def run(self, domain, task, timeout):
        rec = {"id": task["id"], "domain": domain, "feasible": feasible(task),
               "func": task["evaluator"].get("func")}
        needs = network_needs(task)
        rec["network_needs"] = needs[:5]
        if not setup_offline(needs):
            rec.update(offline=False, setup_ok=None, score=None, fault="network")
            return rec
        rec["offline"] = True
        grader_net = bool(needs)  # only the grader reaches out
        rec["grader_needs_network"] = grader_net
        start = time.monotonic()
        env = self.env
        try:
            with deadline(timeout):
                # DesktopEnv.reset(task), step by step: revert, re-attach,
                # task info, cache dir, then each config step.
                env._revert_to_snapshot()
                env._start_emulator()
                t = json.loads(json.dumps(task))
                post = t["evaluator"].pop("postconfig", [])
                env._set_task_info(t)
                env.setup_controller.reset_cache_dir(env.cache_dir)
                env.action_history.clear()
                rec["setup_ok"] = self._steps(t.get("config", []), "config", rec)
                rec["setup_seconds"] = round(time.monotonic() - start, 1)
                if not rec["setup_ok"]:
                    return rec
                if not self._steps(post, "postconfig", rec):
                    return rec
                self.routes.take()
                rec["running"] = "grader"
                try:
                    score = env.evaluate()  # postconfig already played
                    rec["score"] = float(score)
                    # A getter that met an error answer returns None and
                    # the metric 0: keep what deskfarm answered.
                    errs = self.routes.take()
                    if errs:
                        rec["grader_route_errors"] = errs
                except Exception as e:  # noqa: BLE001
                    errs = self.routes.take()
                    rec.update(score=None, grader_error=repr(e)[:500], route_errors=errs,
                               fault="network" if grader_net else attribute(e, errs, None))
                    if rec["fault"] == "runner":
                        rec["missing_module"] = missing_module(e)
                    return rec
        except TaskTimeout as e:
            rec.update(fault="timeout", error="%s, in %s" % (e, rec.get("running")))
            rec.setdefault("setup_ok", None)
            return rec
        finally:
            rec.pop("running", None)
            rec["seconds"] = round(time.monotonic() - start, 1)
        rec["passes_untouched"] = bool(rec["feasible"] and rec["score"] > 0)
        if rec["passes_untouched"]:
            rec["grader"] = {"func": task["evaluator"]["func"], "result": task["evaluator"].get("result"),
                             "expected": task["evaluator"].get("expected")}
        return rec


def summary(records, ran_domains=None):
    """The per-domain Markdown table of records."""
    by = collections.OrderedDict()
    for r in sorted(records, key=lambda r: r["domain"]):
        d = by.setdefault(r["domain"], collections.Counter(), )
        d["tasks"] += 1
        d["offline"] += bool(r.get("offline"))
        d["run"] += r.get("offline") and "seconds" in r
        d["setup_ok"] += bool(r.get("setup_ok"))
        d["graded"] += r.get("score") is not None
        d["untouched"] += bool(r.get("passes_untouched"))
        if r.get("fault") and r["fault"] != "network":
            d["blocked:" + r["fault"]] += 1
        if r.get("fault") == "network":
            d["network"] += 1
    lines = ["| domain | tasks | offline | run | set up ok | graded | passes untouched | blocked (offline) |",
             "|---|---|---|---|---|---|---|---|"]
    tot = collections.Counter()
    for dom, c in by.items():
        tot.update(c)
        lines.append(_row(dom, c))
    lines.append(_row("**all**", tot))
    return "\n".join(lines)


def _row(dom, c):
    blocked = ", ".join("%s %d" % (k[8:], v) for k, v in sorted(c.items()) if k.startswith("blocked:")) or "-"
    return "| %s | %d | %d | %d | %d | %d | %d | %s |" % (dom, c["tasks"], c["offline"], c["run"], c["setup_ok"],
                                                      c["graded"], c["untouched"], blocked)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--osworld", required=True, help="an OSWorld checkout (desktop_env/, evaluation_examples/)")
    ap.add_argument("--out", required=True, help="JSON lines report")
    ap.add_argument("--domain", action="append", default=[])
    ap.add_argument("--task", action="append", default=[], help="a task id; repeatable")
    ap.add_argument("--per-domain", type=int, default=0, help="run at most N offline tasks per domain (0: all)")
    ap.add_argument("--timeout", type=int, default=240, help="seconds per task")
    ap.add_argument("--cache-dir", help="where OSWorld's setup and getters keep the files they fetch "
                    "(default: osworld-cache/ beside --out, so a run from the source tree writes into no tracked folder)")
    ap.add_argument("--classify-only", action="store_true", help="scan the tasks; run none")
    ap.add_argument("--skip", action="append", default=[], help="a report whose run tasks are not run again")
    ap.add_argument("--summary", action="append", default=[], help="print the table of these reports; run nothing")
    a = ap.parse_args(argv)
    if not a.cache_dir:
        beside = os.getcwd() if a.out == "-" else os.path.dirname(os.path.abspath(a.out))
        a.cache_dir = os.path.join(beside, "osworld-cache")
    if a.summary:
        recs = {}
        for p in a.summary:
            for r in read_report(p):
                if r["id"] not in recs or "seconds" in r:
                    recs[r["id"]] = r
        print(summary(list(recs.values())))
        print_untouched(recs.values())
        return 0
    done = {r["id"] for p in a.skip for r in read_report(p) if "seconds" in r}
    # SIGTERM (a timeout around the run) ends it through the finally below,
    # which ends the episode.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    for noisy in ("desktopenv.setup", "desktopenv.pycontroller", "desktopenv.getters", "urllib3"):
        logging.getLogger(noisy).setLevel(logging.WARNING)

    tasks = load_tasks(a.osworld, a.domain, a.task)
    stubbed = install_stubs()
    log.info("stubbed imports Debian lacks: %s", ", ".join(stubbed) or "none")
    records = []
    todo = []
    ran = collections.Counter()
    for domain, t in tasks:
        needs = network_needs(t)
        off = setup_offline(needs)
        if t["id"] in done:
            continue
        if not off or a.classify_only or (a.per_domain and ran[domain] >= a.per_domain):
            r = {"id": t["id"], "domain": domain, "feasible": feasible(t), "func": t["evaluator"].get("func"),
                 "offline": off, "network_needs": needs[:5]}
            if not off:
                r["fault"] = "network"
            records.append(r)
            continue
        ran[domain] += 1
        todo.append((domain, t))

    todo = round_robin(todo)
    env = None
    if todo:
        sys.path.insert(0, os.path.abspath(a.osworld))
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        os.chdir(a.osworld)  # OSWorld reads evaluation_examples/settings/... relative to its root
        import deskfarm_osworld
        deskfarm_osworld.register()
        from desktop_env.desktop_env import DesktopEnv
        routes = RouteErrors()
        routes.install()
        env = DesktopEnv(provider_name="deskfarm", cache_dir=a.cache_dir, require_a11y_tree=False)
        routes.base = env.controller.http_server
        runner = Runner(env, routes, a.cache_dir)
    try:
        with open(a.out, "w") as out:
            head = {"header": True, "stubbed_imports": stubbed, "tasks": len(tasks),
                    "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
            if env is not None:
                vm = env.provider.client._call("GET", "/v1/vms/" + env.provider.episode["vm"])
                head.update(vm=vm.get("id"), image=vm.get("image"), image_hash=vm.get("image_hash"),
                            accel=vm.get("accel"), boot_seconds=vm.get("boot_seconds"))
                log.info("vm %s image %s %s", vm.get("id"), vm.get("image"), vm.get("image_hash"))
            out.write(json.dumps(head) + "\n")
            for r in records:
                out.write(json.dumps(r) + "\n")
            for i, (domain, t) in enumerate(todo):
                r = runner.run(domain, t, a.timeout)
                log.info("[%d/%d] %s/%s setup_ok=%s score=%s fault=%s %.0fs", i + 1, len(todo), domain, t["id"],
                         r.get("setup_ok"), r.get("score"), r.get("fault"), r.get("seconds", 0))
                records.append(r)
                out.write(json.dumps(r) + "\n")
                out.flush()
    finally:
        if env is not None:
            env.close()
    print(summary(records))
    print_untouched(records)
    return 0


def round_robin(todo):
    """todo interleaved by domain (one task of each domain in turn), so a
    run cut short has covered every domain a little."""
    by = collections.OrderedDict()
    for domain, t in todo:
        by.setdefault(domain, []).append((domain, t))
    out = []
    while any(by.values()):
        for q in by.values():
            if q:
                out.append(q.pop(0))
    return out


def read_report(path):
    with open(path) as f:
        return [r for r in map(json.loads, f) if "id" in r]


def print_untouched(records):
    untouched = [r for r in records if r.get("passes_untouched")]
    if untouched:
        print("\npasses untouched:")
        for r in sorted(untouched, key=lambda r: (r["domain"], r["id"])):
            print("- %s/%s score %s, grader %s" % (r["domain"], r["id"], r["score"], json.dumps(r["grader"]["func"])))


if __name__ == "__main__":
    sys.exit(main())

"""Unit tests of osworld_tasks' classification (network detection, fault
attribution) on OSWorld's own task JSONs (testdata/osworld_tasks, see its
PROVENANCE.md), and one E2E test that runs the runner on real tasks against
a real farm. Run: python3 -m unittest discover -s python/tests
"""

import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))

import osworld_tasks as ot  # noqa: E402

DATA = os.path.join(HERE, "testdata", "osworld_tasks")


def task(domain, prefix):
    d = os.path.join(DATA, domain)
    (name,) = [f for f in os.listdir(d) if f.startswith(prefix)]
    with open(os.path.join(d, name)) as f:
        return json.load(f)


class NetworkTest(unittest.TestCase):
    def test_offline_task_has_no_needs(self):
        self.assertEqual(ot.network_needs(task("os", "28cc3b7e")), [])
        self.assertEqual(ot.network_needs(task("vs_code", "276cc624")), [])

    def test_download_of_an_internet_url(self):
        needs = ot.network_needs(task("gimp", "38f48d40"))
        self.assertEqual({n["where"] for n in needs}, {"config"})
        self.assertTrue(needs[0]["what"].startswith("https://huggingface.co/"), needs)
        self.assertFalse(ot.setup_offline(needs))
        self.assertFalse(ot.feasible(task("gimp", "38f48d40")))

    def test_chrome_open_tabs_of_an_internet_url(self):
        needs = ot.network_needs(task("chrome", "35253b65"))
        self.assertEqual([n["where"] for n in needs], ["config"])
        self.assertIn("://", needs[0]["what"])

    def test_localhost_is_not_the_internet(self):
        t = task("chrome", "35253b65")
        # The same task with its tabs pointing at the guest itself.
        for s in t["config"]:
            if s["type"] == "chrome_open_tabs":
                s["parameters"]["urls_to_open"] = ["http://localhost:8080/", "https://127.0.0.1/x"]
        self.assertEqual(ot.network_needs(t), [])

    def test_postconfig_download_is_setup(self):
        needs = ot.network_needs(task("os", "5812b315"))
        self.assertEqual({n["where"] for n in needs}, {"postconfig"})
        self.assertFalse(ot.setup_offline(needs))

    def test_grader_only(self):
        needs = ot.network_needs(task("multi_apps", "acb0f96b"))
        self.assertTrue(needs)
        self.assertEqual({n["where"] for n in needs}, {"grader"})
        self.assertTrue(ot.setup_offline(needs))

    def test_googledrive_and_login_steps(self):
        whats = {n["what"] for n in ot.network_needs(task("multi_apps", "b52b40a5"))}
        self.assertIn("googledrive step", whats)
        self.assertIn("login step", whats)


class FaultTest(unittest.TestCase):
    def test_missing_module_is_the_runners(self):
        try:
            try:
                raise ot.MissingModule("playwright")
            except ot.MissingModule as e:
                # As SetupController.setup re-raises a failed step.
                raise Exception("Setup step 1 failed") from e
        except Exception as e:
            self.assertEqual(ot.attribute(e, [("/setup/launch", 500, "")], True), "runner")
            self.assertEqual(ot.missing_module(e), "playwright")

    def test_missing_program_is_the_images(self):
        t = task("vs_code", "276cc624")
        launch = t["config"][0]
        self.assertEqual(ot.step_program(launch), "code")
        self.assertEqual(ot.attribute(None, [("/setup/launch", 500, "")], True), "image")

    def test_route_error_without_missing_program_is_deskfarms(self):
        self.assertEqual(ot.attribute(RuntimeError("boom"), [("/setup/execute", 500, "")], False), "deskfarm")

    def test_grader_raising_alone(self):
        self.assertEqual(ot.attribute(TypeError("NoneType"), [], None), "grader")

    def test_timeout(self):
        self.assertEqual(ot.attribute(ot.TaskTimeout("x"), [("/setup/open_file", 500, "")], True), "timeout")

    def test_shell_step_program(self):
        step = task("os", "28cc3b7e")["config"][0]
        self.assertEqual(step["type"], "execute")
        self.assertEqual(ot.step_program(step), step["parameters"]["command"][0]
                         if isinstance(step["parameters"]["command"], list)
                         else step["parameters"]["command"].split()[0])


class StubTest(unittest.TestCase):
    def test_stub_defers_the_import_error_to_use(self):
        finder = ot._StubFinder(["no_such_osworld_dep"])
        sys.meta_path.append(finder)
        try:
            from no_such_osworld_dep.sync_api import TimeoutError as TE, sync_playwright  # noqa: F401
            with self.assertRaises(ot.MissingModule) as cm:
                sync_playwright()
            self.assertEqual(cm.exception.module, "no_such_osworld_dep")
            # Usable in an except clause, as OSWorld's code uses it.
            try:
                raise ValueError("x")
            except TE:
                self.fail("caught by the stub")
            except ValueError:
                pass
        finally:
            sys.meta_path.remove(finder)
            for k in [k for k in sys.modules if k.startswith("no_such_osworld_dep")]:
                del sys.modules[k]


def require_vm():
    return bool(os.environ.get("DESKFARM_REQUIRE_VM") or os.environ.get("CI"))


class E2ERunnerTest(unittest.TestCase):
    """Runs the runner on three small offline tasks against a farm serving
    pool osworld (DESKFARM_URL) with OSWorld's checkout at OSWORLD_SRC.
    Skipped locally without them; fails under DESKFARM_REQUIRE_VM or CI."""

    TASKS = ["28cc3b7e-b194-4bc9-8353-d04c0f4d56d2",  # os: exact_match over a command's output
             "b6781586-6346-41cd-935a-a6b1487918fc",  # os: is_utc_0
             "276cc624-87ea-4f08-ab93-f770e3790175"]  # vs_code: launches code

    def test_E2E_runner_scores_real_tasks(self):
        src = os.environ.get("OSWORLD_SRC")
        if not (src and os.environ.get("DESKFARM_URL")):
            if require_vm():
                self.fail("OSWORLD_SRC and DESKFARM_URL must name an OSWorld checkout and a farm with pool osworld")
            self.skipTest("no OSWORLD_SRC / DESKFARM_URL")
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "r.jsonl")
            args = [sys.executable, os.path.join(HERE, "..", "osworld_tasks.py"), "--osworld", src, "--out", out,
                    "--timeout", "120", "--cache-dir", os.path.join(d, "cache")]
            for t in self.TASKS:
                args += ["--task", t]
            p = subprocess.run(args, capture_output=True, text=True, timeout=170)
            self.assertEqual(p.returncode, 0, p.stderr[-3000:])
            with open(out) as f:
                recs = {r["id"]: r for r in map(json.loads, f) if "id" in r}
        self.assertEqual(set(recs), set(self.TASKS), recs)
        ex = recs[self.TASKS[0]]
        self.assertTrue(ex["setup_ok"], ex)
        self.assertIn(ex["score"], (0.0, 1.0), ex)  # a real score from OSWorld's grader
        # Untouched, the task is not done: OSWorld's grader must say 0.
        self.assertEqual(ex["score"], 0.0, ex)
        self.assertIsNotNone(recs[self.TASKS[1]].get("score"), recs[self.TASKS[1]])
        self.assertIn("| os | 2 | 2 | 2 |", p.stdout)


if __name__ == "__main__":
    unittest.main()

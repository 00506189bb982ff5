"""Unit tests of osworld_tasks' classification (network detection, fault
attribution) on OSWorld's own task JSONs (testdata/osworld_tasks, see its
PROVENANCE.md). The runner against a real farm: `make osworld-tasks OSWORLD=DIR`
(docs/osworld.md). Run: python3 -m unittest discover -s python/tests
"""

import json
import os
import sys
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


if __name__ == "__main__":
    unittest.main()

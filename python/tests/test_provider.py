"""Tests of deskfarm_osworld against a tiny in-process fake of deskfarm's
API (and of one VM's OSWorld port), making DesktopEnv's calls in
DesktopEnv's order. Run: python3 -m unittest discover -s python/tests
"""

import io
import json
import os
import sys
import tarfile
import tempfile
import threading
import types
import unittest
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import deskfarm_osworld  # noqa: E402
from deskfarm_osworld import Client, DeskfarmProvider  # noqa: E402


class FakeDeskfarm:
    """deskfarm's episode API plus one VM's OSWorld /screenshot, on one port."""

    def __init__(self):
        self.calls = []
        self.episodes = {}
        self.polls_before_address = 2
        self.archive = b""
        self.snapshots = set()  # ep1's named snapshots
        fake = self

        class H(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def _send(self, code, body, ctype="application/json"):
                b = body if isinstance(body, bytes) else json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(b)))
                self.end_headers()
                self.wfile.write(b)

            def _body(self):
                n = int(self.headers.get("Content-Length") or 0)
                return json.loads(self.rfile.read(n)) if n else None

            def do_POST(self):
                fake.calls.append(("POST", self.path, self._body(), self.headers.get("Authorization")))
                if self.path == "/v1/episodes":
                    ep = {"id": "ep1", "vm": "vm1", "pool": "osworld", "state": "active", "warm": True}
                    fake.episodes["ep1"] = ep
                    return self._send(201, ep)
                if self.path == "/v1/episodes/ep1/reset":
                    return self._send(200, {"reset_seconds": 0.4})
                if self.path == "/v1/episodes/ep1/snapshots":
                    name = fake.calls[-1][2]["name"]
                    if name in fake.snapshots:
                        return self._send(409, {"error": {"code": "snapshot_exists", "message": name + " exists"}})
                    fake.snapshots.add(name)
                    return self._send(201, {"name": name, "bytes": 1 << 20})
                pre, _, name = self.path.rpartition("/snapshots/")
                if pre == "/v1/episodes/ep1" and name.endswith("/revert"):
                    name = unquote(name[:-len("/revert")])
                    if name not in fake.snapshots:
                        return self._send(404, {"error": {"code": "snapshot_not_found", "message": "no " + name}})
                    return self._send(200, {"id": "vm1", "snapshot": name, "revert_ms": 90})
                self._send(404, {"error": "no"})

            def do_GET(self):
                fake.calls.append(("GET", self.path, None, self.headers.get("Authorization")))
                if self.path == "/v1/episodes/gone":
                    return self._send(410, {"error": {"code": "node_lost", "message": "node n2 lost"}})
                if self.path == "/v1/episodes/ep1":
                    ep = dict(fake.episodes["ep1"])
                    if fake.polls_before_address > 0:
                        fake.polls_before_address -= 1
                    else:
                        ep["osworld_address"] = "127.0.0.1:%d:41001:41002:41003" % fake.port
                    fake.episodes["ep1"] = ep
                    return self._send(200, ep)
                if self.path == "/v1/trajectories/ep1/export?format=tar":
                    return self._send(200, fake.archive, "application/x-tar")
                if self.path == "/screenshot":
                    return self._send(200, b"\x89PNG\r\n\x1a\n", "image/png")
                self._send(404, {"error": "no"})

            def do_DELETE(self):
                fake.calls.append(("DELETE", self.path, None, self.headers.get("Authorization")))
                if self.path == "/v1/episodes/ep1":
                    fake.snapshots.clear()  # deskfarm drops them at the end
                    return self._send(200, dict(fake.episodes["ep1"], state="ended"))
                pre, _, name = self.path.rpartition("/snapshots/")
                if pre == "/v1/episodes/ep1" and unquote(name) in fake.snapshots:
                    fake.snapshots.discard(unquote(name))
                    return self._send(204, b"")
                self._send(404, {"error": "no"})

        self.srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.port = self.srv.server_address[1]
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()

    def close(self):
        self.srv.shutdown()
        self.srv.server_close()

    def api_calls(self):
        return [(m, p) for m, p, _, _ in self.calls if p != "/screenshot"]


class ProviderTest(unittest.TestCase):
    def setUp(self):
        self.fake = FakeDeskfarm()
        self.addCleanup(self.fake.close)
        client = Client(url="http://127.0.0.1:%d" % self.fake.port, token="tok")
        self.p = DeskfarmProvider(client=client, pool="osworld", ttl_s=3600)

    def test_desktop_env_call_order(self):
        path = "deskfarm:osworld"
        # DesktopEnv.__init__ -> _start_emulator: start, then the address.
        self.p.start_emulator(path, True, "Ubuntu")
        addr = self.p.get_ip_address(path)
        self.assertEqual(addr, "127.0.0.1:%d:41001:41002:41003" % self.fake.port)
        fields = addr.split(":")
        self.assertEqual(len(fields), 5)  # DesktopEnv reads exactly five
        # reset() of a used env: revert (in place: None), then start again.
        self.assertIsNone(self.p.revert_to_snapshot(path, "init_state"))
        self.p.start_emulator(path, True, "Ubuntu")
        self.assertEqual(self.p.get_ip_address(path), addr)
        # close()
        self.p.stop_emulator(path)
        self.assertEqual(self.fake.api_calls(), [
            ("POST", "/v1/episodes"),
            ("GET", "/v1/episodes/ep1"), ("GET", "/v1/episodes/ep1"), ("GET", "/v1/episodes/ep1"),
            ("POST", "/v1/episodes/ep1/reset"),
            ("DELETE", "/v1/episodes/ep1"),
        ])
        start = self.fake.calls[0]
        self.assertEqual(start[2], {"pool": "osworld", "ttl_s": 3600.0})
        self.assertEqual(start[3], "Bearer tok")
        # A second stop (DesktopEnv's cleanup after a failure) does nothing.
        self.p.stop_emulator(path)
        self.assertEqual(len(self.fake.api_calls()), 6)

    def test_save_state_and_revert_by_name(self):
        path = "deskfarm:osworld"
        self.p.start_emulator(path, True, "Ubuntu")
        n = len(self.fake.api_calls())
        # A harness's checkpoint: saved in place, reverted to by name.
        self.p.save_state(path, "step 3")
        self.assertIsNone(self.p.revert_to_snapshot(path, "step 3"))
        # init_state, never saved, is the ready state: a reset.
        self.assertIsNone(self.p.revert_to_snapshot(path, "init_state"))
        # Saving a name again replaces it.
        self.p.save_state(path, "step 3")
        self.assertEqual(self.fake.api_calls()[n:], [
            ("POST", "/v1/episodes/ep1/snapshots"),
            ("POST", "/v1/episodes/ep1/snapshots/step%203/revert"),
            ("POST", "/v1/episodes/ep1/reset"),
            ("POST", "/v1/episodes/ep1/snapshots"),
            ("DELETE", "/v1/episodes/ep1/snapshots/step%203"),
            ("POST", "/v1/episodes/ep1/snapshots"),
        ])
        self.assertEqual(self.fake.calls[-1][2], {"name": "step 3"})
        # A name deskfarm does not hold is its error, typed by code.
        with self.assertRaises(deskfarm_osworld.DeskfarmError) as cm:
            self.p.revert_to_snapshot(path, "never")
        self.assertEqual((cm.exception.status, cm.exception.code), (404, "snapshot_not_found"))
        # A save_state named init_state is what init_state means after.
        self.p.save_state(path, "init_state")
        self.p.revert_to_snapshot(path, "init_state")
        self.assertEqual(self.fake.api_calls()[-1], ("POST", "/v1/episodes/ep1/snapshots/init_state/revert"))
        self.p.stop_emulator(path)
        self.assertEqual(self.p.saved, set())

    def test_refused_start_raises(self):
        client = Client(url="http://127.0.0.1:%d/nothing-here" % self.fake.port)
        p = DeskfarmProvider(client=client)
        with self.assertRaises(RuntimeError):
            p.start_emulator("x", True, "Ubuntu")
        self.assertIsNone(p.episode)


    def test_cluster_codes_are_typed(self):
        with self.assertRaises(deskfarm_osworld.NodeLost) as cm:
            self.p.client.episode("gone")
        self.assertEqual((cm.exception.status, cm.exception.code), (410, "node_lost"))
        self.assertIn("node n2 lost", str(cm.exception))
        self.assertTrue(issubclass(deskfarm_osworld.ClusterUnavailable, deskfarm_osworld.DeskfarmError))


def tar_of(*entries):
    """A tar of (name, bytes) files, or (name, TarInfo type) for others."""
    b = io.BytesIO()
    with tarfile.open(fileobj=b, mode="w") as t:
        for name, what in entries:
            ti = tarfile.TarInfo(name)
            if what not in (tarfile.SYMTYPE, tarfile.LNKTYPE, tarfile.FIFOTYPE):
                ti.size = len(what)
                t.addfile(ti, io.BytesIO(what))
            else:
                ti.type = what
                ti.linkname = "/etc"
                t.addfile(ti)
    return b.getvalue()


EXPORT = tar_of(("traj.jsonl", b'{"step_num": 1}\n'), ("step_1_20261201@162200.png", b"\x89PNG one"),
                ("recording.mp4", b"mp4"), ("deskfarm/trajectory.jsonl", b'{"step": 1}\n'),
                ("deskfarm/screens/ab.png", b"\x89PNG one"))


class TrajectoryTest(unittest.TestCase):
    def setUp(self):
        self.fake = FakeDeskfarm()
        self.fake.polls_before_address = 0
        self.fake.archive = EXPORT
        self.addCleanup(self.fake.close)
        self.client = Client(url="http://127.0.0.1:%d" % self.fake.port, token="tok")
        self.dir = tempfile.mkdtemp()
        self.addCleanup(lambda: __import__("shutil").rmtree(self.dir))

    def test_record_writes_the_export_beside_the_results(self):
        p = DeskfarmProvider(client=self.client, pool="osworld", ttl_s=60, record=True)
        p.start_emulator("deskfarm:osworld", True, "Ubuntu")
        self.assertEqual(self.fake.calls[0][2], {"pool": "osworld", "ttl_s": 60.0, "record": True})
        dest = p.write_trajectory(self.dir)
        self.assertEqual(dest, os.path.join(self.dir, "deskfarm"))
        with open(os.path.join(dest, "deskfarm", "screens", "ab.png"), "rb") as f:
            self.assertEqual(f.read(), b"\x89PNG one")
        with open(os.path.join(dest, "traj.jsonl")) as f:
            self.assertEqual(json.loads(f.read()), {"step_num": 1})
        # The end writes it again (finished), after the episode ended.
        p.stop_emulator("deskfarm:osworld")
        self.assertEqual([c for c in self.fake.api_calls() if c[0] != "POST"][-2:],
                         [("DELETE", "/v1/episodes/ep1"), ("GET", "/v1/trajectories/ep1/export?format=tar")])

    def test_without_record_nothing_changes(self):
        os.environ.pop("DESKFARM_RECORD", None)
        p = DeskfarmProvider(client=self.client, pool="osworld", ttl_s=60)
        p.start_emulator("deskfarm:osworld", True, "Ubuntu")
        self.assertEqual(self.fake.calls[0][2], {"pool": "osworld", "ttl_s": 60.0})
        p.stop_emulator("deskfarm:osworld")
        self.assertNotIn("/v1/trajectories/ep1/export?format=tar", [c[1] for c in self.fake.calls])

    def test_escaping_entries_are_refused(self):
        for bad in [tar_of(("../escaped", b"x")), tar_of(("a/../../escaped", b"x")), tar_of(("/tmp/escaped-abs", b"x")),
                    tar_of(("link", tarfile.SYMTYPE)), tar_of(("fifo", tarfile.FIFOTYPE))]:
            self.fake.archive = bad
            with self.assertRaises(deskfarm_osworld.DeskfarmError) as cm:
                self.client.export_trajectory("ep1", os.path.join(self.dir, "out"))
            self.assertEqual(cm.exception.code, "unsafe_archive")
            self.assertFalse(os.path.lexists(os.path.join(self.dir, "escaped")))
            self.assertFalse(os.path.lexists(os.path.join(self.dir, "out", "link")))

    def test_unknown_trajectory_is_the_servers_error(self):
        with self.assertRaises(deskfarm_osworld.DeskfarmError) as cm:
            self.client.export_trajectory("nope", self.dir)
        self.assertEqual(cm.exception.status, 404)


class RegisterTest(unittest.TestCase):
    """register() against a stand-in of OSWorld's two modules, shaped as
    OSWorld's are: a factory that raises for unknown names and an __init__
    that raises ValueError outside its hard-coded sets."""

    def setUp(self):
        pkg = types.ModuleType("desktop_env")
        pkg.__path__ = []
        providers = types.ModuleType("desktop_env.providers")

        def create_vm_manager_and_provider(provider_name, region, use_proxy=False):
            if provider_name == "docker":
                return "docker-manager", "docker-provider"
            raise NotImplementedError(provider_name)

        providers.create_vm_manager_and_provider = create_vm_manager_and_provider
        env_mod = types.ModuleType("desktop_env.desktop_env")
        env_mod.create_vm_manager_and_provider = create_vm_manager_and_provider

        class DesktopEnv:
            def __init__(self, provider_name="vmware", region=None, path_to_vm=None):
                self.provider_name = provider_name
                self.manager, self.provider = env_mod.create_vm_manager_and_provider(provider_name, region, use_proxy=False)
                if provider_name in {"docker", "aws"}:
                    self.is_environment_used = False
                elif provider_name in {"vmware", "virtualbox"}:
                    self.is_environment_used = True
                else:
                    raise ValueError(provider_name)

        env_mod.DesktopEnv = DesktopEnv
        controllers = types.ModuleType("desktop_env.controllers")
        controllers.__path__ = []
        python_mod = types.ModuleType("desktop_env.controllers.python")

        class PythonController:  # OSWorld's: the VM's address, end_recording(dest) writes the mp4
            def __init__(self, vm_ip, server_port):
                self.vm_ip, self.server_port = vm_ip, server_port

            def end_recording(self, dest):
                with open(dest, "wb") as f:
                    f.write(b"osworld's own mp4")

        python_mod.PythonController = PythonController
        self.mods = {"desktop_env": pkg, "desktop_env.providers": providers, "desktop_env.desktop_env": env_mod,
                     "desktop_env.controllers": controllers, "desktop_env.controllers.python": python_mod}
        self.saved = {k: sys.modules.get(k) for k in self.mods}
        sys.modules.update(self.mods)
        self.addCleanup(self.restore)
        deskfarm_osworld.provider._registered = False

    def restore(self):
        for k, v in self.saved.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v
        deskfarm_osworld.provider._registered = False

    def test_register_patches_both_places(self):
        env_cls = self.mods["desktop_env.desktop_env"].DesktopEnv
        with self.assertRaises(NotImplementedError):
            env_cls(provider_name="deskfarm")
        deskfarm_osworld.register()
        deskfarm_osworld.register()  # idempotent
        env = env_cls(provider_name="deskfarm")
        self.assertEqual(env.provider_name, "deskfarm")
        self.assertFalse(env.is_environment_used)  # a clean start, as docker
        self.assertIsInstance(env.provider, DeskfarmProvider)
        env2 = env_cls("deskfarm")  # positional, as some callers pass it
        self.assertIsInstance(env2.provider, DeskfarmProvider)
        # Other providers are untouched.
        self.assertEqual(env_cls(provider_name="docker").provider, "docker-provider")
        _, p = self.mods["desktop_env.providers"].create_vm_manager_and_provider("deskfarm", None)
        self.assertIsInstance(p, DeskfarmProvider)

    def test_end_recording_writes_the_trajectory_beside(self):
        self.mods["desktop_env.desktop_env"].DesktopEnv  # noqa: B018
        original = self.mods["desktop_env.controllers.python"].PythonController.end_recording
        self.addCleanup(setattr, self.mods["desktop_env.controllers.python"].PythonController, "end_recording", original)
        deskfarm_osworld.register()
        fake = FakeDeskfarm()
        fake.polls_before_address = 0
        fake.archive = EXPORT
        self.addCleanup(fake.close)
        p = DeskfarmProvider(client=Client(url="http://127.0.0.1:%d" % fake.port), record=True)
        p.start_emulator("deskfarm:osworld", True, "Ubuntu")
        host, port = p.get_ip_address("x").split(":")[:2]
        result_dir = tempfile.mkdtemp()
        self.addCleanup(lambda: __import__("shutil").rmtree(result_dir))
        ctl = self.mods["desktop_env.controllers.python"].PythonController(host, int(port))
        ctl.end_recording(os.path.join(result_dir, "recording.mp4"))
        with open(os.path.join(result_dir, "recording.mp4"), "rb") as f:
            self.assertEqual(f.read(), b"osworld's own mp4")  # OSWorld's recording as before
        with open(os.path.join(result_dir, "deskfarm", "recording.mp4"), "rb") as f:
            self.assertEqual(f.read(), b"mp4")  # deskfarm's beside it
        self.assertTrue(os.path.exists(os.path.join(result_dir, "deskfarm", "deskfarm", "trajectory.jsonl")))
        p.stop_emulator("x")
        # Another VM's controller (or a provider not recording) writes nothing more.
        other = tempfile.mkdtemp()
        self.addCleanup(lambda: __import__("shutil").rmtree(other))
        ctl.end_recording(os.path.join(other, "recording.mp4"))
        self.assertEqual(os.listdir(other), ["recording.mp4"])


if __name__ == "__main__":
    unittest.main()

"""DeskfarmProvider, DeskfarmVMManager and the OSWorld patches (register)."""

import functools
import logging
import os
import posixpath
import shutil
import tarfile
import threading
import time
from urllib.parse import quote

import requests

log = logging.getLogger("deskfarm_osworld")

PROVIDER_NAME = "deskfarm"

# INIT_STATE is DesktopEnv's default snapshot_name: the VM's ready state,
# which every leased VM starts at and a reset returns to.
INIT_STATE = "init_state"

try:  # OSWorld's base classes when OSWorld is importable; plain objects otherwise.
    from desktop_env.providers.base import Provider as _Provider, VMManager as _VMManager
except Exception:  # noqa: BLE001 - any import failure means "no OSWorld here"
    _Provider, _VMManager = object, object


class DeskfarmError(RuntimeError):
    """An error answer of deskfarm's API: its stable code (api/errors.go),
    message and HTTP status."""

    def __init__(self, method, path, status, code, message):
        super().__init__("deskfarm %s %s: %d %s: %s" % (method, path, status, code, message))
        self.status, self.code, self.message = status, code, message


class NodeLost(DeskfarmError):
    """node_lost: the episode's cluster node stopped renewing its Lease;
    the episode is gone with it. Start another."""


class ClusterUnavailable(DeskfarmError):
    """cluster_unavailable: a cluster's apiserver did not answer a claim;
    running episodes go on. Retry later."""


_BY_CODE = {"node_lost": NodeLost, "cluster_unavailable": ClusterUnavailable}


class Client:
    """deskfarm's HTTP API, the few calls the provider makes. On a cluster
    every call may go to any agent: episode routes reach the episode's
    owner through it."""

    def __init__(self, url=None, token=None, timeout=600):
        self.url = (url or os.environ.get("DESKFARM_URL") or "http://127.0.0.1:8080").rstrip("/")
        self.token = token if token is not None else os.environ.get("DESKFARM_TOKEN", "")
        self.timeout = timeout
        self.session = requests.Session()

    def _call(self, method, path, body=None):
        headers = {}
        if self.token:
            headers["Authorization"] = "Bearer " + self.token
        r = self.session.request(method, self.url + path, json=body, headers=headers, timeout=self.timeout)
        if r.status_code >= 300:
            self._raise(method, path, r)
        return r.json() if r.content else None

    def start_episode(self, pool, ttl_s, record=None):
        body = {"pool": pool, "ttl_s": ttl_s}
        if record is not None:
            body["record"] = bool(record)
        return self._call("POST", "/v1/episodes", body)

    def export_trajectory(self, trajectory_id, dest):
        """Write a trajectory's export (GET /v1/trajectories/{id}/export, a
        tar) into the directory dest: OSWorld's layout (traj.jsonl, a PNG per
        step, recording.mp4) and deskfarm/, the trajectory as stored. Only
        regular files and directories inside dest are written; any other
        entry stops the export with a DeskfarmError. Returns the files
        written."""
        path = "/v1/trajectories/%s/export?format=tar" % trajectory_id
        headers = {"Authorization": "Bearer " + self.token} if self.token else {}
        with self.session.get(self.url + path, headers=headers, timeout=self.timeout, stream=True) as r:
            if r.status_code >= 300:
                self._raise("GET", path, r)
            return _untar(r.raw, dest, path)

    def _raise(self, method, path, r):
        try:
            err = r.json()["error"]
            code, message = err["code"], err.get("message", "")
        except (ValueError, KeyError, TypeError):
            code, message = "http_%d" % r.status_code, r.text.strip()
        raise _BY_CODE.get(code, DeskfarmError)(method, path, r.status_code, code, message)

    def episode(self, episode_id):
        return self._call("GET", "/v1/episodes/" + episode_id)

    def end_episode(self, episode_id):
        return self._call("DELETE", "/v1/episodes/" + episode_id)

    def reset_vm(self, vm_id):
        return self._call("POST", "/v1/vms/%s/reset" % vm_id)

    def reset_episode(self, episode_id):
        """The episode's VM back to its ready snapshot, the episode kept."""
        return self._call("POST", "/v1/episodes/%s/reset" % episode_id)

    def save_snapshot(self, episode_id, name):
        """The episode's VM's RAM and disk saved in place as snapshot name."""
        return self._call("POST", "/v1/episodes/%s/snapshots" % episode_id, {"name": name})

    def revert_snapshot(self, episode_id, name):
        """The episode's VM back in place to its snapshot name."""
        return self._call("POST", "/v1/episodes/%s/snapshots/%s/revert" % (episode_id, quote(name, safe="")))

    def delete_snapshot(self, episode_id, name):
        return self._call("DELETE", "/v1/episodes/%s/snapshots/%s" % (episode_id, quote(name, safe="")))


def _untar(stream, dest, what):
    """Extract a tar stream's regular files and directories under dest,
    refusing (DeskfarmError) names that leave it and other entry types: the
    archive is the server's, and may not write elsewhere."""
    os.makedirs(dest, exist_ok=True)
    files = 0
    with tarfile.open(fileobj=stream, mode="r|") as tar:
        for m in tar:
            name = posixpath.normpath(m.name)
            if name in (".", ""):
                continue
            if name.startswith("/") or name == ".." or name.startswith("../") or "\\" in m.name:
                raise DeskfarmError("GET", what, 200, "unsafe_archive", "entry %r refused: its path leaves %s" % (m.name, dest))
            target = os.path.join(dest, *name.split("/"))
            if m.isdir():
                os.makedirs(target, exist_ok=True)
            elif m.isreg():
                os.makedirs(os.path.dirname(target), exist_ok=True)
                with open(target, "wb") as f:
                    shutil.copyfileobj(tar.extractfile(m), f)
                files += 1
            else:
                raise DeskfarmError("GET", what, 200, "unsafe_archive", "entry %r refused: not a regular file or directory" % m.name)
    return files


# The recording providers by their OSWorld server's "host:port": OSWorld's
# controller knows only that address when end_recording names the result
# directory (register patches it).
_recorders = {}


def _truthy(v):
    return str(v or "").strip().lower() in ("1", "true", "yes", "on")


class DeskfarmProvider(_Provider):
    """An OSWorld Provider over one deskfarm episode at a time.

    With record (or DESKFARM_RECORD=1) the episode is recorded by deskfarm,
    and each OSWorld end_recording(<result_dir>/recording.mp4) also writes
    deskfarm's trajectory export to <result_dir>/deskfarm/ (once more when
    the episode ends, with the trajectory finished). OSWorld's own
    recording.mp4 is written as before."""

    def __init__(self, region=None, client=None, pool=None, ttl_s=None, ready_timeout=300, record=None):
        self.region = region
        self.client = client or Client()
        self.pool = pool or os.environ.get("DESKFARM_POOL", "osworld")
        self.ttl_s = float(ttl_s or os.environ.get("DESKFARM_TTL_S", 6 * 3600))
        self.ready_timeout = ready_timeout
        self.record = _truthy(os.environ.get("DESKFARM_RECORD")) if record is None else bool(record)
        self.episode = None
        self.result_dir = None  # where the trajectory was last written
        self.saved = set()  # the snapshot names save_state saved on the episode

    def start_emulator(self, path_to_vm, headless=True, os_type=None, *args, **kwargs):
        """Lease a VM of the pool, once: DesktopEnv calls this after every
        revert too, and the leased VM is still ours then."""
        if self.episode is not None:
            return
        ep = self.client.start_episode(self.pool, self.ttl_s, record=True if self.record else None)
        log.info("deskfarm episode %s on vm %s (warm=%s, recording=%s)", ep.get("id"), ep.get("vm"), ep.get("warm"), ep.get("recording", False))
        self.episode = ep
        try:
            self._wait_ready()
        except Exception:
            self.stop_emulator(path_to_vm)
            raise
        if self.record:
            _recorders[":".join(self.episode["osworld_address"].split(":")[:2])] = self

    def write_trajectory(self, result_dir):
        """Write deskfarm's export of this episode's trajectory (so far) to
        <result_dir>/deskfarm/ and return that path. A trajectory's id is
        its episode's."""
        if self.episode is None:
            raise RuntimeError("no deskfarm episode: start_emulator first")
        dest = os.path.join(result_dir, "deskfarm")
        n = self.client.export_trajectory(self.episode["id"], dest)
        self.result_dir = result_dir
        log.info("deskfarm trajectory %s: %d files in %s", self.episode["id"], n, dest)
        return dest

    def _wait_ready(self):
        # The per-VM ports open once deskfarm has the VM ready; then its
        # OSWorld server answers /screenshot (as the docker provider waits).
        deadline = time.monotonic() + self.ready_timeout
        while not self.episode.get("osworld_address"):
            if time.monotonic() > deadline:
                raise RuntimeError("deskfarm episode %s has no osworld_address (is the pool's image osworld?)" % self.episode["id"])
            time.sleep(0.5)
            self.episode = self.client.episode(self.episode["id"])
        host, server = self.episode["osworld_address"].split(":")[:2]
        url = "http://%s:%s/screenshot" % (host, server)
        while True:
            try:
                if requests.get(url, timeout=10).status_code == 200:
                    return
            except requests.RequestException:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("deskfarm vm %s: %s not answering" % (self.episode["vm"], url))
            time.sleep(1)

    def get_ip_address(self, path_to_vm):
        """OSWorld's "host:server_port:chromium_port:vnc_port:vlc_port"."""
        if self.episode is None:
            raise RuntimeError("no deskfarm episode: start_emulator first")
        return self.episode["osworld_address"]

    def save_state(self, path_to_vm, snapshot_name):
        """Save the leased VM's RAM and disk in place as the named snapshot
        (POST /v1/episodes/{id}/snapshots); the VM keeps running. Saving a
        name again replaces that snapshot. The episode's snapshots go when
        it ends (stop_emulator)."""
        if self.episode is None:
            raise RuntimeError("no deskfarm episode: start_emulator first")
        start = time.monotonic()
        try:
            self.client.save_snapshot(self.episode["id"], snapshot_name)
        except DeskfarmError as e:
            if e.code != "snapshot_exists":
                raise
            self.client.delete_snapshot(self.episode["id"], snapshot_name)
            self.client.save_snapshot(self.episode["id"], snapshot_name)
        self.saved.add(snapshot_name)
        log.info("deskfarm vm %s: snapshot %s saved in %.2fs", self.episode["vm"], snapshot_name, time.monotonic() - start)

    def revert_to_snapshot(self, path_to_vm, snapshot_name):
        """Return the leased VM in place to the named snapshot: one that
        save_state saved, else init_state (DesktopEnv's default) is the
        ready state (a reset), and any other name is reverted to by name on
        deskfarm, which answers snapshot_not_found for one it does not hold.
        The path (and the address) stay the same, so return None."""
        if self.episode is None:
            return None
        start = time.monotonic()
        # Through the episode: on a cluster, the agent asked may not be
        # the VM's own.
        if snapshot_name == INIT_STATE and snapshot_name not in self.saved:
            self.client.reset_episode(self.episode["id"])
            log.info("deskfarm vm %s reset in %.2fs", self.episode["vm"], time.monotonic() - start)
            return None
        self.client.revert_snapshot(self.episode["id"], snapshot_name)
        log.info("deskfarm vm %s reverted to snapshot %s in %.2fs", self.episode["vm"], snapshot_name, time.monotonic() - start)
        return None

    def stop_emulator(self, path_to_vm, region=None, *args, **kwargs):
        """End the episode: deskfarm resets the VM and returns it to the pool."""
        ep, self.episode = self.episode, None
        if ep is None:
            return
        self.saved = set()  # deskfarm drops them with the episode
        for k in [k for k, p in _recorders.items() if p is self]:
            del _recorders[k]
        self.client.end_episode(ep["id"])
        if self.record and self.result_dir:
            # The ended episode's trajectory is finished: its video whole.
            dest = os.path.join(self.result_dir, "deskfarm")
            self.client.export_trajectory(ep["id"], dest)
            log.info("deskfarm trajectory %s (finished) in %s", ep["id"], dest)


class DeskfarmVMManager(_VMManager):
    """No registry: deskfarm's pools hold the VMs (like docker's manager)."""

    checked_and_cleaned = True

    def __init__(self, *args, **kwargs):
        pass

    def initialize_registry(self, **kwargs):
        pass

    def add_vm(self, vm_path, **kwargs):
        pass

    def delete_vm(self, vm_path, **kwargs):
        pass

    def occupy_vm(self, vm_path, pid, **kwargs):
        pass

    def list_free_vms(self, **kwargs):
        return []

    def check_and_clean(self, **kwargs):
        pass

    def get_vm_path(self, os_type=None, region=None, screen_size=None, **kwargs):
        # DesktopEnv only passes this back to the provider.
        return "deskfarm:" + os.environ.get("DESKFARM_POOL", "osworld")


_registered = False
_lock = threading.Lock()
_building = threading.local()


def register():
    """Make DesktopEnv(provider_name="deskfarm") work: patch OSWorld's
    provider factory and DesktopEnv.__init__ (see the package docstring).
    Idempotent; needs OSWorld's desktop_env importable."""
    global _registered
    with _lock:
        if _registered:
            return
        import desktop_env.desktop_env as env_mod
        import desktop_env.providers as providers

        original = providers.create_vm_manager_and_provider

        @functools.wraps(original)
        def create_vm_manager_and_provider(provider_name, region=None, *args, **kwargs):
            name = str(provider_name).lower().strip()
            if name == PROVIDER_NAME or (getattr(_building, "deskfarm", False) and name == "docker"):
                return DeskfarmVMManager(), DeskfarmProvider(region)
            return original(provider_name, region, *args, **kwargs)

        providers.create_vm_manager_and_provider = create_vm_manager_and_provider
        env_mod.create_vm_manager_and_provider = create_vm_manager_and_provider

        cls = env_mod.DesktopEnv
        init = cls.__init__

        @functools.wraps(init)
        def __init__(self, *args, **kwargs):
            args = list(args)
            given = kwargs.get("provider_name", args[0] if args else "vmware")
            if str(given).lower().strip() != PROVIDER_NAME:
                return init(self, *args, **kwargs)
            # Built as docker is: a clean start, and no path expansion.
            if "provider_name" in kwargs:
                kwargs["provider_name"] = "docker"
            else:
                args[0] = "docker"
            _building.deskfarm = True
            try:
                init(self, *args, **kwargs)
            finally:
                _building.deskfarm = False
            self.provider_name = PROVIDER_NAME

        cls.__init__ = __init__
        _patch_end_recording()
        _registered = True
        log.info("deskfarm_osworld: provider %r registered (patched create_vm_manager_and_provider and DesktopEnv.__init__)", PROVIDER_NAME)


def _patch_end_recording():
    """Wrap OSWorld's PythonController.end_recording(dest): after OSWorld
    writes its recording.mp4, a recording deskfarm episode's trajectory goes
    beside it, to <dirname(dest)>/deskfarm/. A failed export is logged,
    never raised: OSWorld's own result stands."""
    try:
        import desktop_env.controllers.python as ctl
    except Exception:  # noqa: BLE001 - an OSWorld without the controller
        return
    cls = ctl.PythonController
    original = cls.end_recording

    @functools.wraps(original)
    def end_recording(self, dest, *args, **kwargs):
        out = original(self, dest, *args, **kwargs)
        p = _recorders.get("%s:%s" % (getattr(self, "vm_ip", ""), getattr(self, "server_port", "")))
        if p is not None and p.episode is not None:
            try:
                p.write_trajectory(os.path.dirname(os.path.abspath(dest)))
            except Exception as e:  # noqa: BLE001
                log.warning("deskfarm trajectory %s not written beside %s: %s", p.episode.get("id"), dest, e)
        return out

    cls.end_recording = end_recording

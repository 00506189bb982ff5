"""OSWorld provider "deskfarm": OSWorld's DesktopEnv on deskfarm's VMs.

One documented call, made once before DesktopEnv is built:

    import deskfarm_osworld
    deskfarm_osworld.register()

register() patches OSWorld at import time, in its two places that
hard-code provider names (as of OSWorld main, April 2026):

  * desktop_env.providers.create_vm_manager_and_provider (and the copy of
    that name desktop_env.desktop_env imported), which raises for unknown
    names: "deskfarm" now returns DeskfarmVMManager and DeskfarmProvider;
  * DesktopEnv.__init__'s sets of clean-start and dirty-start providers,
    which raise ValueError for other names: DesktopEnv(provider_name=
    "deskfarm") is built as a clean-start provider (like docker: a VM
    leased from a pool is at its ready snapshot, so the first reset skips
    the revert), and its provider_name reads "deskfarm" afterwards.

The provider leases an episode from deskfarm's pool "osworld" and hands
DesktopEnv the VM's OSWorld address, "host:server:chromium:vnc:vlc", which
deskfarm serves from the host (Go package osworld). Reverting resets the VM
in place to its ready snapshot (under a second with KVM); no VM is booted
per task.

Configuration, from the environment: DESKFARM_URL (default
http://127.0.0.1:8080), DESKFARM_TOKEN (for a deskfarm reached beyond
loopback), DESKFARM_POOL (default osworld), DESKFARM_TTL_S (the lease,
default 21600: one DesktopEnv usually runs many tasks).

Needs only python3 and python3-requests.
"""

from .provider import (ClusterUnavailable, DeskfarmError, DeskfarmProvider, DeskfarmVMManager, Client, NodeLost,
                       register)

__all__ = ["DeskfarmProvider", "DeskfarmVMManager", "Client", "register", "DeskfarmError", "NodeLost",
           "ClusterUnavailable"]

// Package osworld owns OSWorld's in-VM HTTP protocol, served by deskfarm on
// the host.
//
// OSWorld (github.com/xlang-ai/OSWorld, its server now also in
// xlang-ai/osworld-server, src/http_routes.py) drives a VM through a Flask
// server that runs inside the guest on port 5000. deskfarm serves the same
// routes, with the same methods, fields, status codes and JSON shapes, from
// the host, one http.Handler per VM (NewHandler), built from deskfarm's own
// parts:
//
//   - screenshots and the screen size come from the VM's live VNC mirror
//     (package desk), at native size with the cursor;
//   - commands run through the guest agent (package vmm), as the desktop
//     user "user" with the X session's environment (DISPLAY, XAUTHORITY,
//     the session D-Bus, XDG_RUNTIME_DIR), never as root (package guestx);
//   - /setup/download_file's download runs in the guest too (download.py),
//     so the guest's network decides what it reaches;
//   - files move through the guest agent and end up owned by that user;
//   - /accessibility and /terminal run package atspi's walk (from the
//     host, over the VM's accessibility port), the walk Cua's get_accessibility_tree
//     makes too;
//   - recordings are encoded on the host by ffmpeg (package video) from
//     the frames the mirror already has, not by x11grab in the guest.
//
// The rule the harness depends on most: a command that ran and failed is a
// 200 with its returncode. OSWorld's client retries any other status three
// times, so a 500 after a side effect would repeat it; 500 is kept for a
// command that could not run at all, as subprocess.run raising would give.
//
// Ports (ports.go) gives each VM of an OSWorld pool its own TCP listener
// serving that handler, plus a view-only RFB listener of its screen, and
// reports them as OSWorld's "host:server:chromium:vnc:vlc" address.
package osworld

// Package cua owns Cua's computer-server protocol: the wire that Cua's
// Computer (trycua/cua, libs/python/computer) speaks to the computer-server
// that normally runs inside the machine it drives. A Handler serves that
// protocol for one deskfarm VM, from the host. Cua's input commands are a
// vocabulary like Claude's or OSWorld's: each becomes neutral actions
// (package actions) that the VM's desk plays, refuses while a person holds
// control and records in the activity log, as for any agent; text the VNC
// keyboard cannot carry, horizontal wheel clicks and the clipboard take the
// desk's guest input path. The shell, file and window commands run in the
// guest as the desktop user through the guest agent.
//
// The protocol was read from trycua/cua @ b296ec9 (cua-computer-server
// 0.3.42, cua-computer 0.5.19): computer_server/main.py for the routes and
// dispatch, handlers/linux.py, base.py and generic.py for each command's
// params and answer, computer/interface/generic.py for what the client reads.
// Notes: /work/shared/research/cua-protocol.md.
//
// Routes (relative to the handler; web mounts it at /v1/vms/{id}/cua/ and
// /v1/episodes/{id}/cua/, and Cua's Computer keeps that prefix in
// api_base_url):
//
//   - POST /cmd, body {"command", "params"}: HTTP 200, text/plain, exactly
//     one frame "data: {json}\n\n". The client strips the body and parses
//     everything after the first six bytes, so nothing else may follow.
//     A command that fails is still 200 with {"success": false, "error"}. A
//     bad body or an unknown command is HTTP 400 {"detail"}, as FastAPI
//     answers; the client then retries the command on the websocket.
//   - GET /ws: a websocket carrying the same requests as JSON text frames;
//     each answer is the bare JSON object. There are no request ids, so
//     answers go strictly in request order, one per request. Pings are
//     answered while a command runs.
//   - GET /status: {"status": "ok", "os_type": "linux", "features": []},
//     the readiness probe of cua-sandbox and Cua's cloud provider. Computer
//     itself probes with the "version" command.
//   - GET /commands: the served commands and aliases, as Cua lists them.
//   - /pty*, /playwright_exec, /responses: 409 {"success": false, "code":
//     "unsupported", "error"}, as Cua's own VNC backend refuses them.
//
// Served commands (aliases as in Cua: type, key, click, tap, shell, exec,
// read_file, write_file, ls, mkdir, rm, rmdir):
//
//   - version, get_screen_size, get_cursor_position, screenshot (base64 PNG
//     or JPEG in image_data, native screen pixels);
//   - mouse: left_click, right_click, double_click, move_cursor, mouse_down,
//     mouse_up, drag_to, drag, scroll, scroll_up, scroll_down,
//     scroll_direction. Coordinates are screen pixels; x and y of scroll
//     are wheel clicks (y > 0 up, x > 0 right), each capped at
//     actions.MaxScrollAmount (horizontal ones are scroll actions left and
//     right, which the desk clicks in the guest: QEMU 7.2's VNC drops
//     buttons 6 and 7);
//   - keyboard: type_text, press_key, key_down, key_up, hotkey. Key names
//     are Cua's (enter, esc, pagedown, win, ...) and pynput's (page_down,
//     cmd_l, alt_gr, media_play_pause, ...) on top of actions.ParseKey's.
//     type_text is type actions of at most actions.MaxTextRunes characters:
//     ASCII as VNC keys, any other text pasted by the desk, byte for byte;
//   - run_command (sh -c as the desktop user in its session, cwd its home;
//     timeout in seconds, default 300 like the client's HTTP timeout);
//   - files, as the desktop user (so new files are its own): file_exists,
//     directory_exists, list_dir, read_text, write_text, read_bytes,
//     write_bytes, get_file_size, delete_file, create_dir, delete_dir.
//     Relative paths and ~ resolve against the user's home;
//   - copy_to_clipboard, set_clipboard: clipboard_get and clipboard_set
//     actions;
//   - launch (a shell string or app + args, started detached; answers pid);
//   - windows, with xdotool in the session (X window ids):
//     get_current_window_id, get_application_windows (name contains, any
//     case), get_window_name, get_window_size, get_window_position,
//     set_window_size, set_window_position, minimize_window,
//     activate_window. Those that change the desktop are refused while a
//     person holds control, as actions are.
//
// A failed command answers {"success": false, "error"}; when deskfarm's API
// has a code for the failure that a client can act on (human_control,
// display_closed), the answer carries it as "code", the code the actions
// route gives the same failure.
//
// Not served, answered fast with {"success": false, "code": "unsupported",
// "error"}: get_accessibility_tree, find_element (Cua's own Linux server
// answers a fixed dummy tree and "not supported"), diorama_cmd (macOS),
// get_desktop_environment, set_wallpaper, open (the desktop image has no
// xdg-open), maximize_window and close_window (bookworm's xdotool has no
// windowstate or windowclose, and the image no wmctrl). Anything else (e.g.
// get_active_window_bounds, which Cua's client asks for but no server has)
// is an unknown command, as in Cua.
//
// Authentication is deskfarm's, applied by web before the handler: Cua's
// Computer sends it through api_headers (Authorization: Bearer). The
// websocket "authenticate" command, which Cua's client sends first only when
// it has a cloud API key, is answered with success.
package cua

// Package actions owns deskfarm's neutral action model and everything that
// turns an agent's request into input on a desktop: the translators from
// agent vocabularies onto the model, key names, screenshot scaling and zoom,
// and the executor that plays actions onto a Display.
//
// The path of an action, file by file:
//
//   - action.go: the model. Action is an interface with one type per kind
//     (Move, MoveBy, Click, Drag, Scroll, KeyPress, KeyDown, KeyUp, HoldKey,
//     TypeText, Wait, Screenshot, Zoom, CursorPosition, ButtonDown,
//     ButtonUp, ClipboardGet, ClipboardSet), each with its Validate, and the
//     limits (MaxActions, MaxTextRunes, MaxZoomPixels, ...).
//   - neutral.go: the neutral JSON form ({"kind":"click","x":10,...}); one
//     wire struct per kind, DecodeActions the single entry.
//   - call.go: Decode(tool, input), the one entry over every vocabulary,
//     and Call.Run, which plays a call on a Runner and answers in the
//     call's own shape, with errors in the agent's field names.
//   - claude.go, toolset.go, openai.go, osworld.go, pyautogui.go: the agent
//     vocabularies: Claude's computer tool in every version and its
//     computer_toolset_20260801 (tool_result blocks as anthropic-sdk-go
//     types); OpenAI computer_call items and their computer_call_output
//     (openai-go types); OSWorld's computer_13 and its pyautogui code (a
//     small parser for literal calls; anything else is ErrNotHostPlayable,
//     for the caller to run in the guest). Each parses its input once into
//     the same types; errors name the agent's own fields.
//   - keys.go: key names to keysyms and scancodes, and the US-layout typing
//     table.
//   - exec.go: the Executor. Run checks and maps every action to native
//     pixels before sending anything, then plays them in order.
//   - guest.go: the executor's extension points. GuestInput delivers what
//     QEMU's VNC cannot (non-ASCII text, horizontal scroll, back/forward,
//     the clipboard); GuestActivity makes a settle wait for the guest's
//     vCPUs to go idle as well as the screen.
//   - input.go: the input state machine: what is pressed for one action and
//     what the agent holds across requests, with the invariant that
//     everything pressed is released on every path.
//   - pacing.go: the gaps between input events and why they are needed.
//   - capture.go, options.go, scale.go, encode.go: settling, screenshots and
//     zooms at the session's screenshot size, per-request options and the
//     Result.
//
// Errors for bad requests are *FieldError (internal/fielderr's Error, shared
// with web and vmm) wrapping ErrInvalid or a more specific sentinel; errors from the
// Display wrap ErrDisplay.
package actions

// Package actions owns deskfarm's neutral action model and everything that
// turns an agent's request into input on a desktop: the translators from
// agent vocabularies onto the model, key names, screenshot scaling and zoom,
// and the executor that plays actions onto a Display.
//
// The path of an action, file by file:
//
//   - action.go: the model. Action is an interface with one type per kind
//     (Move, Click, Drag, Scroll, KeyPress, KeyDown, KeyUp, HoldKey,
//     TypeText, Wait, Screenshot, Zoom, CursorPosition, ButtonDown,
//     ButtonUp), each with its Validate, and the limits (MaxActions,
//     MaxTextRunes, MaxZoomPixels, ...).
//   - neutral.go: the neutral JSON form ({"kind":"click","x":10,...}); one
//     wire struct per kind, DecodeActions the single entry.
//   - claude.go, openai.go, osworld.go: the agent vocabularies (Claude's
//     computer tool in every version, with its tool_result content blocks;
//     OpenAI's computer-use actions; OSWorld's computer_13). Each parses its
//     input once into the same types; errors name the agent's own fields.
//     A new vocabulary (Claude's toolset, OpenAI computer_call items) is one
//     more translator producing []Action.
//   - keys.go: key names to keysyms and scancodes, and the US-layout typing
//     table.
//   - exec.go: the Executor. Run checks and maps every action to native
//     pixels before sending anything, then plays them in order.
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

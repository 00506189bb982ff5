// Package actions owns deskfarm's neutral action model: one type per kind of
// input an agent asks for, each with its Validate, the limits that keep one
// request from wedging a VM, key names, the neutral JSON form, and the
// errors for bad requests. It links only the standard library (a test keeps
// it so): the agent vocabularies that translate onto the model are package
// vocab, and the player that plays it onto a desktop is package player.
//
//   - action.go: the model. Action is an interface with one type per kind
//     (Move, MoveBy, Click, Drag, Scroll, KeyPress, KeyDown, KeyUp, HoldKey,
//     TypeText, Wait, Screenshot, Zoom, CursorPosition, ButtonDown,
//     ButtonUp, ClipboardGet, ClipboardSet), each with its Validate, and the
//     limits (MaxActions, MaxTextRunes, MaxZoomPixels, ...).
//   - neutral.go: the neutral JSON form ({"kind":"click","x":10,...}); one
//     wire struct per kind, DecodeActions the single entry.
//   - keys.go: key names to keysyms and scancodes, and the US-layout typing
//     table.
//   - errors.go: the sentinels, and the constructors of *FieldError the
//     vocabularies and the player share.
//
// Errors for bad requests are *FieldError (internal/fielderr's Error, shared
// with web and vmm) wrapping ErrInvalid or a more specific sentinel.
package actions

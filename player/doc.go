// Package player plays the neutral action model (package actions) onto a
// desktop's Display: the Executor, the input state it keeps across requests,
// the pacing of input events, settling, screenshots and zooms at the
// session's screenshot size, and their encoding. It knows no agent
// vocabulary (package vocab answers in those) and links no AI SDK.
//
// The path of a run, file by file:
//
//   - exec.go: the Executor. Run checks and maps every action to native
//     pixels before sending anything, then plays them in order. Runner is
//     what the vocabularies play a call on.
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
//   - display.go: the Display a vnc.Client implements.
//
// Errors from the Display wrap actions.ErrDisplay, from GuestInput
// actions.ErrGuest; a failure while playing is a *actions.StepError naming
// the action.
package player

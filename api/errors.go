package api

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
)

// ErrorResponse is the body of every error response.
type ErrorResponse struct {
	Error ErrorBody `json:"error"`
}

// ErrorBody describes what went wrong.
type ErrorBody struct {
	Code    string `json:"code"` // one of the Code constants
	Message string `json:"message"`
	// Field names the JSON field or query parameter at fault, when known.
	Field string `json:"field,omitempty"`
}

// Error is an error answer of the API as a Go error: the body plus the
// HTTP status it came with. Package client returns it for every non-2xx
// answer.
type Error struct {
	Status int // HTTP status
	ErrorBody
}

func (e *Error) Error() string {
	msg := e.Message
	if e.Field != "" && !strings.Contains(msg, e.Field) {
		msg = e.Field + ": " + msg
	}
	return fmt.Sprintf("%s (%s, HTTP %d)", msg, e.Code, e.Status)
}

// Is makes errors.Is match an *Error by its code: target an *Error with
// the same Code, and the same Status unless target's is 0 (the sentinels
// of package client are such).
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code && (t.Status == 0 || t.Status == e.Status)
}

// IsCode reports whether err is, or wraps, an *Error with the given code.
func IsCode(err error, code string) bool {
	e, ok := errors.AsType[*Error](err)
	return ok && e.Code == code
}

// Error codes. They are stable: clients branch on them. Status gives the
// HTTP status each is sent with.
const (
	CodeNotFound              = "not_found"              // a VM or route that does not exist
	CodeInvalidRequest        = "invalid_request"        // a field is wrong; Field names it
	CodeBadJSON               = "bad_json"               // the body is not a JSON object
	CodeUnknownImage          = "unknown_image"          // no recipe of that name
	CodeImageNotBuilt         = "image_not_built"        // the recipe exists, its image is not built
	CodeBrokenImage           = "broken_image"           // the built image is unusable
	CodeNotRunning            = "not_running"            // the VM is not running
	CodeInsufficientResources = "insufficient_resources" // the host lacks memory or CPUs
	CodeTooLarge              = "too_large"              // a body, file or stdin over its limit
	CodeAgentError            = "agent_error"            // the guest agent failed
	CodeTimeout               = "timeout"                // the operation ran out of time
	CodeVMDead                = "vm_dead"                // the VM's QEMU died
	CodeHypervisorDown        = "hypervisor_unavailable" // libvirtd does not answer (GET /healthz); the farm is reconnecting
	CodeUnauthorized          = "unauthorized"           // missing or wrong token
	CodeForbidden             = "forbidden"              // a control token that is not (or no longer) valid
	CodeMethodNotAllowed      = "method_not_allowed"     // the route has no such method
	CodeCanceled              = "canceled"               // the client went away (logged, never seen)
	CodeInternal              = "internal"               // anything else

	// Episodes and pools.
	CodeUnknownPool     = "unknown_pool"      // no pool of that name
	CodeEpisodeNotFound = "episode_not_found" // no episode of that id
	CodeEpisodeEnded    = "episode_ended"     // the episode has ended
	CodePoolFull        = "pool_full"         // the pool holds its max VMs
	CodeNotLeased       = "not_leased"        // a change to a pool VM that no episode leases
	CodeHostFull        = "host_full"         // host memory less the reserve is taken
	CodeNoPools         = "no_pools"          // the server has no pools
	CodeNotWarm         = "not_warm"          // a bind named a pool VM that is not warm, clean and unleased now

	// A cluster of agents (issue 15).
	CodeNodeLost           = "node_lost"           // the episode's node stopped renewing its Lease: the episode is gone
	CodeClusterUnavailable = "cluster_unavailable" // the apiserver did not answer a cluster-wide claim
	CodeNodeUnreachable    = "node_unreachable"    // the episode's owner agent did not answer a proxied call; the message names the node

	// Actions and the display.
	CodeUnsupportedAction = "unsupported_action" // an action kind the tool version lacks
	CodeUnknownKey        = "unknown_key"        // a key name not understood
	CodeUntypable         = "untypable_text"     // text the keyboard path cannot type
	CodeOutOfBounds       = "out_of_bounds"      // a coordinate outside the screen
	CodeUnsupportedButton = "unsupported_button" // a mouse button the display cannot send
	CodePointerUnknown    = "pointer_unknown"    // the action needs a pointer position not yet known
	CodeDisplayError      = "display_error"      // the VNC display failed
	CodeNoDisplay         = "no_display"         // the server has no display backend
	CodeHumanControl      = "human_control"      // a person holds control of the VM
	CodeDisplayClosed     = "display_closed"     // the VM's display closed under the call (VM died or destroyed)
	CodeVMReset           = "vm_reset"           // the VM was reset under the call (a manual reset or the episode's end) and its actions cut short
	CodeTooManyViewers    = "too_many_viewers"   // a viewer connection over the per-VM or farm-wide cap
	CodeGuestInput        = "guest_input_error"  // input through the guest's session (Unicode text, horizontal scroll, back/forward, clipboard) failed
	CodeNotHostPlayable   = "not_host_playable"  // pyautogui code that must run in the guest, where it could not

	// Trajectories (issue 16).
	CodeRecording      = "recording"       // the VM is already being recorded, or the trajectory is still recording
	CodeNotRecording   = "not_recording"   // the VM is not being recorded
	CodeNoTrajectories = "no_trajectories" // the server keeps no trajectories

	// Who may call: the guards against other web pages and viewers (issue 9).
	CodeMisdirectedRequest   = "misdirected_request"    // the Host header names no name this farm answers to
	CodeCrossSite            = "cross_site"             // a browser request from a page of another origin
	CodeUnsupportedMediaType = "unsupported_media_type" // a body of a type the route does not take
	CodeViewerToken          = "viewer_token"           // a viewer's token, where the control token is needed
)

// StatusClientClosed is nginx's status for a request whose client went
// away; it only ever reaches the server's log.
const StatusClientClosed = 499

// statuses is the HTTP status of each code.
var statuses = map[string]int{
	CodeNotFound:              http.StatusNotFound,
	CodeInvalidRequest:        http.StatusBadRequest,
	CodeBadJSON:               http.StatusBadRequest,
	CodeUnknownImage:          http.StatusBadRequest,
	CodeImageNotBuilt:         http.StatusConflict,
	CodeBrokenImage:           http.StatusInternalServerError,
	CodeNotRunning:            http.StatusConflict,
	CodeInsufficientResources: http.StatusInsufficientStorage,
	CodeTooLarge:              http.StatusRequestEntityTooLarge,
	CodeAgentError:            http.StatusBadGateway,
	CodeTimeout:               http.StatusGatewayTimeout,
	CodeVMDead:                http.StatusGone,
	CodeHypervisorDown:        http.StatusServiceUnavailable,
	CodeUnauthorized:          http.StatusUnauthorized,
	CodeForbidden:             http.StatusForbidden,
	CodeMethodNotAllowed:      http.StatusMethodNotAllowed,
	CodeCanceled:              StatusClientClosed,
	CodeInternal:              http.StatusInternalServerError,

	CodeUnknownPool:     http.StatusNotFound,
	CodeEpisodeNotFound: http.StatusNotFound,
	CodeEpisodeEnded:    http.StatusGone,
	CodePoolFull:        http.StatusTooManyRequests,
	CodeNotLeased:       http.StatusConflict,
	CodeHostFull:        http.StatusInsufficientStorage,
	CodeNoPools:         http.StatusNotImplemented,
	CodeNotWarm:         http.StatusConflict,

	CodeNodeLost:           http.StatusGone,
	CodeClusterUnavailable: http.StatusServiceUnavailable,
	CodeNodeUnreachable:    http.StatusBadGateway,

	CodeUnsupportedAction: http.StatusBadRequest,
	CodeUnknownKey:        http.StatusBadRequest,
	CodeUntypable:         http.StatusBadRequest,
	CodeOutOfBounds:       http.StatusBadRequest,
	CodeUnsupportedButton: http.StatusBadRequest,
	CodePointerUnknown:    http.StatusConflict,
	CodeDisplayError:      http.StatusBadGateway,
	CodeNoDisplay:         http.StatusNotImplemented,
	CodeHumanControl:      http.StatusConflict,
	CodeDisplayClosed:     http.StatusGone,
	CodeVMReset:           http.StatusConflict,
	CodeTooManyViewers:    http.StatusTooManyRequests,
	CodeGuestInput:        http.StatusBadGateway,
	CodeNotHostPlayable:   http.StatusBadRequest,

	CodeRecording:      http.StatusConflict,
	CodeNotRecording:   http.StatusConflict,
	CodeNoTrajectories: http.StatusNotImplemented,

	CodeSnapshotNotFound: http.StatusNotFound,
	CodeSnapshotExists:   http.StatusConflict,
	CodeSnapshotLimit:    http.StatusConflict,
	CodeNoSnapshots:      http.StatusNotImplemented,

	CodeMisdirectedRequest:   http.StatusMisdirectedRequest,
	CodeCrossSite:            http.StatusForbidden,
	CodeUnsupportedMediaType: http.StatusUnsupportedMediaType,
	CodeViewerToken:          http.StatusForbidden,
}

// Status returns the HTTP status the server sends with code, and 500 for
// a code it does not know.
func Status(code string) int {
	if s, ok := statuses[code]; ok {
		return s
	}
	return http.StatusInternalServerError
}

// Codes returns every error code, for documentation and tests.
func Codes() []string {
	out := make([]string, 0, len(statuses))
	for c := range statuses {
		out = append(out, c)
	}
	return out
}

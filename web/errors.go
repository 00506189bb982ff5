package web

import (
	"context"
	"errors"
	"net/http"

	"github.com/deskfarm/deskfarm/actions"
	"github.com/deskfarm/deskfarm/api"
	"github.com/deskfarm/deskfarm/cluster"
	"github.com/deskfarm/deskfarm/desk"
	"github.com/deskfarm/deskfarm/internal/fielderr"
	"github.com/deskfarm/deskfarm/pool"
	"github.com/deskfarm/deskfarm/trajectory"
	"github.com/deskfarm/deskfarm/vmm"
	"github.com/deskfarm/deskfarm/vocab"
)

// FieldError is the module's one field error type (internal/fielderr):
// an invalid request naming the JSON field or query parameter at fault.
type FieldError = fielderr.Error

// fielder is an error that knows which request field is at fault.
type fielder interface {
	error
	InvalidField() string
}

func invalidf(field, format string, args ...any) error {
	return fielderr.Newf(field, vmm.ErrInvalid, format, args...)
}

// httpError is a protocol-level error that no sentinel covers.
type httpError struct {
	status int
	code   string
	msg    string
	field  string
}

func (e *httpError) Error() string { return e.msg }

func (e *httpError) InvalidField() string { return e.field }

// sentinel maps an error of another package to its API code.
type sentinel struct {
	err  error
	code string
}

// sentinels maps the errors of vmm, pool and actions to API codes; the
// status is api.Status(code). Order matters when an error wraps several:
// the more specific comes first (pool and action errors wrap vmm ones, and
// actions' specific errors come before its generic ErrInvalid).
var sentinels = []sentinel{
	// A cluster's (issue 15): cluster.ErrNoDesktop is a full pool seen
	// cluster-wide, ErrNotFound an episode no Desktop holds.
	{cluster.ErrNodeLost, api.CodeNodeLost},
	{cluster.ErrUnavailable, api.CodeClusterUnavailable},
	{cluster.ErrNoDesktop, api.CodePoolFull},
	{cluster.ErrNotFound, api.CodeEpisodeNotFound},
	{pool.ErrNotWarm, api.CodeNotWarm},

	{pool.ErrUnknownPool, api.CodeUnknownPool},
	{pool.ErrEpisodeNotFound, api.CodeEpisodeNotFound},
	{pool.ErrEpisodeEnded, api.CodeEpisodeEnded},
	{pool.ErrPoolFull, api.CodePoolFull},
	{pool.ErrNotLeased, api.CodeNotLeased},
	{pool.ErrHostFull, api.CodeHostFull},

	// A trajectory's (issue 16); a bad export format or file name is a
	// fielderr.Error wrapping ErrInvalid, which names the field.
	{trajectory.ErrNotFound, api.CodeNotFound},
	{trajectory.ErrRecording, api.CodeRecording},
	{trajectory.ErrNotRecording, api.CodeNotRecording},
	{trajectory.ErrInvalid, api.CodeInvalidRequest},

	// Named snapshots (issue 17); a fork that does not fit is vmm's
	// ErrInsufficientResources (a *vmm.LimitError saying how many fit).
	{vmm.ErrSnapshotNotFound, api.CodeSnapshotNotFound},
	{vmm.ErrSnapshotExists, api.CodeSnapshotExists},
	{vmm.ErrSnapshotLimit, api.CodeSnapshotLimit},

	{desk.ErrHumanControl, api.CodeHumanControl},
	{desk.ErrNotInControl, api.CodeForbidden},
	{desk.ErrClosed, api.CodeDisplayClosed},
	{desk.ErrReset, api.CodeVMReset},

	{vocab.ErrNotHostPlayable, api.CodeNotHostPlayable},
	{actions.ErrGuest, api.CodeGuestInput},
	{actions.ErrTooLarge, api.CodeTooLarge},
	{actions.ErrUnsupportedAction, api.CodeUnsupportedAction},
	{actions.ErrUnknownKey, api.CodeUnknownKey},
	{actions.ErrUntypable, api.CodeUntypable},
	{actions.ErrOutOfBounds, api.CodeOutOfBounds},
	{actions.ErrUnsupportedButton, api.CodeUnsupportedButton},
	{actions.ErrInvalid, api.CodeInvalidRequest},
	{actions.ErrPointerUnknown, api.CodePointerUnknown},
	{actions.ErrDisplay, api.CodeDisplayError},

	{vmm.ErrNotFound, api.CodeNotFound},
	{vmm.ErrInvalid, api.CodeInvalidRequest},
	{vmm.ErrUnknownImage, api.CodeUnknownImage},
	{vmm.ErrImageNotBuilt, api.CodeImageNotBuilt},
	{vmm.ErrBrokenImage, api.CodeBrokenImage},
	{vmm.ErrTooLarge, api.CodeTooLarge},
	{vmm.ErrInsufficientResources, api.CodeInsufficientResources},
	{vmm.ErrDead, api.CodeVMDead},
	{vmm.ErrHypervisorDown, api.CodeHypervisorDown},
	{vmm.ErrNotRunning, api.CodeNotRunning},
	{vmm.ErrTimeout, api.CodeTimeout},
	{vmm.ErrAgent, api.CodeAgentError},
	{context.DeadlineExceeded, api.CodeTimeout},
	{context.Canceled, api.CodeCanceled},
}

// statusClientClosed is nginx's status for a request whose client went
// away; it only ever reaches the log.
const statusClientClosed = api.StatusClientClosed

// classify turns an error into the status and body to send. The field
// comes from a typed error in the chain (fielder), never from the text.
func classify(err error) (int, api.ErrorBody) {
	body := api.ErrorBody{Message: err.Error()}
	if f, ok := errors.AsType[fielder](err); ok {
		body.Field = f.InvalidField()
	}
	if le, ok := errors.AsType[*vmm.LimitError](err); ok && body.Field == "" {
		// A snapshot limit names itself; a fork that does not fit, its count.
		body.Field = le.Limit
		if errors.Is(err, vmm.ErrInsufficientResources) {
			body.Field = "count"
		}
	}
	if he, ok := errors.AsType[*httpError](err); ok {
		body.Code = he.code
		return he.status, body
	}
	for _, s := range sentinels {
		if errors.Is(err, s.err) {
			body.Code = s.code
			return api.Status(s.code), body
		}
	}
	body.Code = api.CodeInternal
	return http.StatusInternalServerError, body
}

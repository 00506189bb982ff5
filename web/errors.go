package web

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"regexp"

	"github.com/deskfarm/deskfarm/vmm"
)

// FieldError is an invalid request that names the JSON field or query
// parameter at fault. It wraps vmm.ErrInvalid unless Err says otherwise.
type FieldError struct {
	Field string // JSON field or query parameter, e.g. "memory_mib"
	Msg   string // what is wrong with it, e.g. "must be at least 128"
	Err   error  // the sentinel it is; nil means vmm.ErrInvalid
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Msg }

// Unwrap returns the sentinel the error stands for.
func (e *FieldError) Unwrap() error {
	if e.Err != nil {
		return e.Err
	}
	return vmm.ErrInvalid
}

// InvalidField names the field at fault. Any error in a chain with this
// method (the vmm package may define one) fills ErrorBody.Field.
func (e *FieldError) InvalidField() string { return e.Field }

// fielder is an error that knows which request field is at fault.
type fielder interface {
	error
	InvalidField() string
}

func invalidf(field, format string, args ...any) error {
	return &FieldError{Field: field, Msg: fmt.Sprintf(format, args...)}
}

// fieldPattern finds the "field NAME: " that vmm.Manager puts in front of
// its ErrInvalid errors (e.g. "create vm: field memory_mib: invalid request: ...").
var fieldPattern = regexp.MustCompile(`(?:^|: )field ([a-z0-9_/]+): `)

// fieldInText returns the field a vmm error message names, or "".
func fieldInText(msg string) string {
	if m := fieldPattern.FindStringSubmatch(msg); m != nil {
		return m[1]
	}
	return ""
}

// httpError is a protocol-level error that no vmm sentinel covers.
type httpError struct {
	status int
	code   string
	msg    string
	field  string
}

func (e *httpError) Error() string { return e.msg }

func (e *httpError) InvalidField() string { return e.field }

// sentinels maps vmm errors to statuses and codes. Order matters when an
// error wraps several: the more specific comes first.
type sentinel struct {
	err    error
	status int
	code   string
}

var sentinels = []sentinel{
	{vmm.ErrNotFound, http.StatusNotFound, CodeNotFound},
	{vmm.ErrInvalid, http.StatusBadRequest, CodeInvalidRequest},
	{vmm.ErrUnknownImage, http.StatusBadRequest, CodeUnknownImage},
	{vmm.ErrImageNotBuilt, http.StatusConflict, CodeImageNotBuilt},
	{vmm.ErrBrokenImage, http.StatusInternalServerError, CodeBrokenImage},
	{vmm.ErrTooLarge, http.StatusRequestEntityTooLarge, CodeTooLarge},
	{vmm.ErrInsufficientResources, http.StatusInsufficientStorage, CodeInsufficientResources},
	{vmm.ErrDead, http.StatusGone, CodeVMDead},
	{vmm.ErrNotRunning, http.StatusConflict, CodeNotRunning},
	{vmm.ErrTimeout, http.StatusGatewayTimeout, CodeTimeout},
	{vmm.ErrAgent, http.StatusBadGateway, CodeAgentError},
	{context.DeadlineExceeded, http.StatusGatewayTimeout, CodeTimeout},
	{context.Canceled, statusClientClosed, CodeCanceled},
}

// statusClientClosed is nginx's status for a request whose client went
// away; it only ever reaches the log.
const statusClientClosed = 499

// classify turns an error into the status and body to send.
func classify(err error) (int, ErrorBody) {
	body := ErrorBody{Message: err.Error()}
	if f, ok := errors.AsType[fielder](err); ok {
		body.Field = f.InvalidField()
	} else if errors.Is(err, vmm.ErrInvalid) {
		body.Field = fieldInText(body.Message)
	}
	if he, ok := errors.AsType[*httpError](err); ok {
		body.Code = he.code
		return he.status, body
	}
	for _, s := range sentinels {
		if errors.Is(err, s.err) {
			body.Code = s.code
			return s.status, body
		}
	}
	body.Code = CodeInternal
	return http.StatusInternalServerError, body
}

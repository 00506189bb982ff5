package web

import "github.com/deskfarm/deskfarm/api"

// The wire types and error codes of the /v1 API live in package api, so
// clients use them without linking the server. These aliases keep callers
// that still name them through web building while they move.

// Deprecated: use the api package's types.
type (
	VMList              = api.VMList
	ResetResponse       = api.ResetResponse
	ExecRequest         = api.ExecRequest
	ExecResponse        = api.ExecResponse
	HealthResponse      = api.HealthResponse
	ErrorResponse       = api.ErrorResponse
	ErrorBody           = api.ErrorBody
	StartEpisodeRequest = api.StartEpisodeRequest
	EpisodeResponse     = api.Episode
	EpisodeList         = api.EpisodeList
	PoolList            = api.PoolList
	ActionsRequest      = api.ActionsRequest
	ActionsResponse     = api.ActionsResponse
)

// MaxExecTimeout bounds ExecRequest.TimeoutS.
//
// Deprecated: use api.MaxExecTimeout.
const MaxExecTimeout = api.MaxExecTimeout

// Error codes.
//
// Deprecated: use the api package's Code constants.
const (
	CodeNotFound              = api.CodeNotFound
	CodeInvalidRequest        = api.CodeInvalidRequest
	CodeBadJSON               = api.CodeBadJSON
	CodeUnknownImage          = api.CodeUnknownImage
	CodeImageNotBuilt         = api.CodeImageNotBuilt
	CodeBrokenImage           = api.CodeBrokenImage
	CodeNotRunning            = api.CodeNotRunning
	CodeInsufficientResources = api.CodeInsufficientResources
	CodeTooLarge              = api.CodeTooLarge
	CodeAgentError            = api.CodeAgentError
	CodeTimeout               = api.CodeTimeout
	CodeVMDead                = api.CodeVMDead
	CodeUnauthorized          = api.CodeUnauthorized
	CodeMethodNotAllowed      = api.CodeMethodNotAllowed
	CodeCanceled              = api.CodeCanceled
	CodeInternal              = api.CodeInternal
	CodeUnknownPool           = api.CodeUnknownPool
	CodeEpisodeNotFound       = api.CodeEpisodeNotFound
	CodeEpisodeEnded          = api.CodeEpisodeEnded
	CodePoolFull              = api.CodePoolFull
	CodeHostFull              = api.CodeHostFull
	CodeNoPools               = api.CodeNoPools
	CodeUnsupportedAction     = api.CodeUnsupportedAction
	CodeUnknownKey            = api.CodeUnknownKey
	CodeUntypable             = api.CodeUntypable
	CodeOutOfBounds           = api.CodeOutOfBounds
	CodeUnsupportedButton     = api.CodeUnsupportedButton
	CodePointerUnknown        = api.CodePointerUnknown
	CodeDisplayError          = api.CodeDisplayError
	CodeNoDisplay             = api.CodeNoDisplay
	CodeHumanControl          = api.CodeHumanControl
)

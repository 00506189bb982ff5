package api

import (
	"fmt"
	"testing"
)

func TestErrorText(t *testing.T) {
	tests := []struct {
		e    Error
		want string
	}{
		{Error{404, ErrorBody{Code: CodeNotFound, Message: "vm x: not found"}}, "vm x: not found (not_found, HTTP 404)"},
		// The field is said once, whether or not the message names it.
		{Error{400, ErrorBody{Code: CodeInvalidRequest, Message: "must be at least 128", Field: "memory_mib"}},
			"memory_mib: must be at least 128 (invalid_request, HTTP 400)"},
		{Error{400, ErrorBody{Code: CodeInvalidRequest, Message: "path: required", Field: "path"}},
			"path: required (invalid_request, HTTP 400)"},
	}
	for _, tt := range tests {
		if got := tt.e.Error(); got != tt.want {
			t.Errorf("Error() = %q, want %q", got, tt.want)
		}
	}
}

func TestIsCode(t *testing.T) {
	err := fmt.Errorf("reset vm x: %w", &Error{Status: 404, ErrorBody: ErrorBody{Code: CodeNotFound}})
	if !IsCode(err, CodeNotFound) || IsCode(err, CodeVMDead) || IsCode(fmt.Errorf("plain"), CodeNotFound) {
		t.Error("IsCode does not follow the chain to the code")
	}
}

func TestStatus(t *testing.T) {
	for code, want := range map[string]int{CodeNotFound: 404, CodeInvalidRequest: 400, CodePoolFull: 429,
		CodeHostFull: 507, CodeHumanControl: 409, CodeNodeLost: 410, CodeClusterUnavailable: 503, CodeNodeUnreachable: 502,
		CodeNotWarm: 409, CodeCanceled: 499, "no_such_code": 500} {
		if got := Status(code); got != want {
			t.Errorf("Status(%q) = %d, want %d", code, got, want)
		}
	}
}

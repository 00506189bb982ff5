package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"syscall"

	"github.com/deskfarm/deskfarm/vmm"
	"github.com/deskfarm/deskfarm/web"
)

// defaultServer is the API the CLI talks to without --server or $DESKFARM_SERVER.
const defaultServer = "http://127.0.0.1:8080"

// apiClient talks to a deskfarm server's /v1 API.
type apiClient struct {
	base  *url.URL // scheme and host, no trailing slash
	token string   // sent as a bearer token when set
	hc    *http.Client
}

// newAPIClient returns a client for the server at base, e.g.
// "http://127.0.0.1:8080".
func newAPIClient(base, token string) (*apiClient, error) {
	u, err := url.Parse(strings.TrimRight(base, "/"))
	if err != nil {
		return nil, fmt.Errorf("server URL %q: %w", base, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("server URL %q: want http://HOST:PORT", base)
	}
	// No overall timeout: a create lasts a boot and an exec up to an hour.
	// Callers bound calls with their context.
	return &apiClient{base: u, token: token, hc: &http.Client{}}, nil
}

// apiError is an error response from the server.
type apiError struct {
	Status int // HTTP status
	web.ErrorBody
}

func (e *apiError) Error() string {
	return fmt.Sprintf("%s (%s, HTTP %d)", e.Message, e.Code, e.Status)
}

// request is one API call.
type request struct {
	method string
	path   string // under base, already escaped
	query  url.Values
	body   io.Reader
	size   int64  // body length; -1 for unknown
	ctype  string // body Content-Type
}

// send makes a call and returns the response when its status is 2xx; the
// caller closes its body. Other statuses become an *apiError.
func (c *apiClient) send(ctx context.Context, rq request) (*http.Response, error) {
	u := c.base.String() + rq.path
	if len(rq.query) > 0 {
		u += "?" + rq.query.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, rq.method, u, rq.body)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", rq.method, rq.path, err)
	}
	if rq.body != nil {
		req.ContentLength = rq.size
		if rq.size == 0 {
			req.Body = http.NoBody
		}
		req.Header.Set("Content-Type", rq.ctype)
	}
	req.Header.Set("Accept", "application/json")
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		// err is a *url.Error: it names the method and URL.
		if errors.Is(err, syscall.ECONNREFUSED) {
			return nil, fmt.Errorf("%w (is `deskfarm serve` running there? set --server or $DESKFARM_SERVER)", err)
		}
		return nil, err
	}
	if resp.StatusCode/100 == 2 {
		return resp, nil
	}
	defer resp.Body.Close()
	return nil, readAPIError(resp)
}

// readAPIError turns an error response into an *apiError, also when a
// proxy in between answered with something other than our JSON.
func readAPIError(resp *http.Response) error {
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	e := &apiError{Status: resp.StatusCode}
	var er web.ErrorResponse
	if json.Unmarshal(body, &er) == nil && er.Error.Code != "" {
		e.ErrorBody = er.Error
		return e
	}
	e.Code = "http_" + strconv.Itoa(resp.StatusCode)
	e.Message = strings.TrimSpace(string(body))
	if e.Message == "" {
		e.Message = resp.Status
	}
	return e
}

// call sends in as JSON (unless nil) and decodes the response into out
// (unless nil).
func (c *apiClient) call(ctx context.Context, method, path string, in, out any) error {
	rq := request{method: method, path: path}
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("%s %s: encode body: %w", method, path, err)
		}
		rq.body, rq.size, rq.ctype = bytes.NewReader(b), int64(len(b)), "application/json"
	}
	resp, err := c.send(ctx, rq)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("%s %s: decode response: %w", method, path, err)
	}
	return nil
}

func vmPath(id string, rest ...string) string {
	p := "/v1/vms/" + url.PathEscape(id)
	for _, r := range rest {
		p += "/" + r
	}
	return p
}

// createVM creates a VM and returns it once it is ready.
func (c *apiClient) createVM(ctx context.Context, opts vmm.CreateOptions) (vmm.VM, error) {
	var vm vmm.VM
	err := c.call(ctx, http.MethodPost, "/v1/vms", opts, &vm)
	return vm, err
}

// listVMs lists the farm's VMs.
func (c *apiClient) listVMs(ctx context.Context) ([]vmm.VM, error) {
	var list web.VMList
	err := c.call(ctx, http.MethodGet, "/v1/vms", nil, &list)
	return list.VMs, err
}

// getVM describes one VM.
func (c *apiClient) getVM(ctx context.Context, id string) (vmm.VM, error) {
	var vm vmm.VM
	err := c.call(ctx, http.MethodGet, vmPath(id), nil, &vm)
	return vm, err
}

// deleteVM destroys a VM.
func (c *apiClient) deleteVM(ctx context.Context, id string) error {
	return c.call(ctx, http.MethodDelete, vmPath(id), nil, nil)
}

// resetVM returns a VM to its ready snapshot.
func (c *apiClient) resetVM(ctx context.Context, id string) (web.ResetResponse, error) {
	var res web.ResetResponse
	err := c.call(ctx, http.MethodPost, vmPath(id, "reset"), nil, &res)
	return res, err
}

// exec runs a program in a VM. A non-zero exit code is not an error.
func (c *apiClient) exec(ctx context.Context, id string, req web.ExecRequest) (web.ExecResponse, error) {
	var res web.ExecResponse
	err := c.call(ctx, http.MethodPost, vmPath(id, "exec"), req, &res)
	return res, err
}

// readFile copies a guest file to w and returns the bytes copied.
func (c *apiClient) readFile(ctx context.Context, id, path string, w io.Writer) (int64, error) {
	resp, err := c.send(ctx, request{method: http.MethodGet, path: vmPath(id, "files"), query: url.Values{"path": {path}}})
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	n, err := io.Copy(w, resp.Body)
	if err != nil {
		return n, fmt.Errorf("read %s from vm %s: %w", path, id, err)
	}
	if resp.ContentLength >= 0 && n != resp.ContentLength {
		return n, fmt.Errorf("read %s from vm %s: got %d of %d bytes", path, id, n, resp.ContentLength)
	}
	return n, nil
}

// writeFile uploads size bytes from r to a guest file with the given mode.
func (c *apiClient) writeFile(ctx context.Context, id, path string, r io.Reader, size int64, mode uint32) error {
	if size > vmm.MaxFileSize {
		return fmt.Errorf("write %s to vm %s: %d bytes exceed the limit of %d", path, id, size, vmm.MaxFileSize)
	}
	q := url.Values{"path": {path}, "mode": {fmt.Sprintf("%04o", mode)}}
	resp, err := c.send(ctx, request{method: http.MethodPut, path: vmPath(id, "files"), query: q,
		body: r, size: size, ctype: "application/octet-stream"})
	if err != nil {
		return err
	}
	resp.Body.Close()
	return nil
}

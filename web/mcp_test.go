package web_test

import (
	"context"
	"net/http"
	"net/netip"
	"strings"
	"testing"

	"github.com/deskfarm/deskfarm/internal/farmtest"
	"github.com/deskfarm/deskfarm/web"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// bearer adds a token to every request.
type bearer struct{ token string }

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

func mcpConnect(ctx context.Context, url, token string) (*mcp.ClientSession, error) {
	hc := &http.Client{}
	if token != "" {
		hc.Transport = bearer{token}
	}
	return mcp.NewClient(&mcp.Implementation{Name: "test", Version: "0"}, nil).
		Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url + "/mcp", HTTPClient: hc}, nil)
}

// TestMCPOverHTTP drives the tools at /mcp with a go-sdk client over
// streamable HTTP, with the API's own authentication.
func TestMCPOverHTTP(t *testing.T) {
	d := farmtest.ServeDesktop(t, web.Options{Token: "s3cret", ViewerToken: "watch", TrustedNets: []netip.Prefix{}})
	ctx := context.Background()

	// A viewer token watches; the MCP tools act.
	if cs, err := mcpConnect(ctx, d.Server.URL, "watch"); err == nil {
		cs.Close()
		t.Fatal("an MCP client with the viewer token connected")
	} else if !strings.Contains(err.Error(), "403") && !strings.Contains(strings.ToLower(err.Error()), "forbidden") {
		t.Errorf("with the viewer token: %v; want a 403", err)
	}
	req, _ := http.NewRequest(http.MethodGet, d.Server.URL+"/mcp", nil)
	req.Header.Set("Authorization", "Bearer watch")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("GET /mcp with the viewer token: %s; want 403", resp.Status)
	}

	if cs, err := mcpConnect(ctx, d.Server.URL, ""); err == nil {
		cs.Close()
		t.Fatal("an MCP client without the token connected")
	} else if !strings.Contains(err.Error(), "401") && !strings.Contains(strings.ToLower(err.Error()), "unauthorized") {
		t.Errorf("without the token: %v; want a 401", err)
	}

	cs, err := mcpConnect(ctx, d.Server.URL, "s3cret")
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "start_episode"})
	if err != nil || res.IsError {
		t.Fatalf("start_episode: %v %+v", err, res)
	}
	msg := res.Content[0].(*mcp.TextContent).Text
	if !strings.Contains(msg, "Live view: "+d.Server.URL+"/vms/v") {
		t.Errorf("start_episode said %q; want a live view on %s", msg, d.Server.URL)
	}
	res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "computer", Arguments: map[string]any{"action": "left_click", "coordinate": []int{3, 4}}})
	if err != nil || res.IsError {
		t.Fatalf("computer: %v %+v", err, res)
	}
	var img *mcp.ImageContent
	for _, c := range res.Content {
		if ic, ok := c.(*mcp.ImageContent); ok {
			img = ic
		}
	}
	if img == nil || img.MIMEType != "image/png" || len(img.Data) < 8 || string(img.Data[1:4]) != "PNG" {
		t.Errorf("computer answered %+v; want a PNG image", res.Content)
	}
	res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "write_file", Arguments: map[string]any{"path": "/tmp/f", "content": "over http"}})
	if err != nil || res.IsError {
		t.Fatalf("write_file: %v %+v", err, res)
	}
	res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "read_file", Arguments: map[string]any{"path": "/tmp/f"}})
	if err != nil || res.IsError || res.Content[0].(*mcp.TextContent).Text != "over http" {
		t.Fatalf("read_file: %v %+v", err, res)
	}
	res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "end_episode"})
	if err != nil || res.IsError {
		t.Fatalf("end_episode: %v %+v", err, res)
	}
}

package osworld

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/deskfarm/deskfarm/desk"
	"github.com/deskfarm/deskfarm/vmm"
	"github.com/deskfarm/deskfarm/vmm/vmmtest"
)

// An OSWorld VM gets its own port while it lives, behind the wrapper the
// API passes; other VMs get none.
func TestPortsFollowVMs(t *testing.T) {
	farm := vmmtest.New()
	farm.Images = []string{"osworld", "desktop"}
	t.Cleanup(farm.Close)
	desks := desk.NewPool(farm, nil)
	t.Cleanup(desks.Close)
	wrapped := 0
	p := &Ports{Farm: farm, Desks: desks, Wrap: func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("Authorization") != "Bearer t" {
				http.Error(w, "no", http.StatusUnauthorized)
				return
			}
			wrapped++
			h.ServeHTTP(w, r)
		})
	}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- p.Run(ctx) }()
	defer func() { cancel(); <-done }()

	vm, err := farm.Create(ctx, vmm.CreateOptions{Image: "osworld", Forwards: []vmm.Forward{{GuestPort: 9222, HostPort: 20001}, {GuestPort: 8080, HostPort: 20002}}})
	if err != nil {
		t.Fatal(err)
	}
	other, _ := farm.Create(ctx, vmm.CreateOptions{Image: "desktop"})
	var addr string
	deadline := time.Now().Add(5 * time.Second)
	for {
		var ok bool
		if addr, ok = p.Address(vm.ID); ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no address for the osworld vm")
		}
		time.Sleep(10 * time.Millisecond)
	}
	f := strings.Split(addr, ":")
	if len(f) != 5 || f[0] != "127.0.0.1" || f[2] != "20001" || f[4] != "20002" || f[1] == "0" || f[3] == "0" {
		t.Fatalf("address %q", addr)
	}
	if _, ok := p.Address(other.ID); ok {
		t.Error("a desktop vm got osworld ports")
	}
	get := func(auth string) (int, string, error) {
		req, _ := http.NewRequest("GET", "http://127.0.0.1:"+f[1]+"/platform", nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), nil
	}
	if code, _, err := get(""); err != nil || code != 401 {
		t.Errorf("without token: %d %v", code, err)
	}
	if code, body, err := get("Bearer t"); err != nil || code != 200 || body != "Linux" || wrapped != 1 {
		t.Errorf("with token: %d %q %v", code, body, err)
	}
	if err := farm.Destroy(ctx, vm.ID); err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(5 * time.Second)
	for {
		if _, ok := p.Address(vm.ID); !ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("address outlived the vm")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, _, err := get("Bearer t"); err == nil {
		t.Error("port still answers after the vm was destroyed")
	}
}

// Command osworld measures OSWorld-shaped tasks on one VM at a time, through
// deskfarm's OSWorld routes (package osworld), as OSWorld's DesktopEnv runs
// them: reset; setup (upload a file, launch an app, open the file and wait
// for its window); five pyautogui steps through /execute; a /file getter.
// It compares deskfarm's in-place reset against a fresh VM per task, booted
// and thrown away as OSWorld's docker provider does, in one run, and prints
// a Markdown table.
//
//	go run ./bench/osworld [-image desktop] [-tasks 6] [-boot-tasks 1]
//
// On the osworld image the steps are pyautogui code run with `python -c`,
// as OSWorld sends them. The desktop image has neither `python` nor a
// pyautogui module, so there each step is the same call made with xdotool
// from `python3 -c` (one Python start and one X client per step, as
// pyautogui costs).
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"time"

	"github.com/deskfarm/deskfarm/bench/internal/farm"
	"github.com/deskfarm/deskfarm/bench/internal/stats"
	"github.com/deskfarm/deskfarm/desk"
	"github.com/deskfarm/deskfarm/osworld"
	"github.com/deskfarm/deskfarm/vmm"
)

func main() {
	image := flag.String("image", "desktop", "image (desktop or osworld)")
	n := flag.Int("tasks", 6, "tasks with deskfarm's reset")
	nb := flag.Int("boot-tasks", 1, "tasks with a fresh VM each")
	flag.Parse()
	if err := run(*image, *n, *nb); err != nil {
		fmt.Fprintln(os.Stderr, "bench/osworld:", err)
		os.Exit(1)
	}
}

// spec is the VM of a task: OSWorld's screen on the osworld image.
func spec(image string, boot bool) vmm.CreateOptions {
	o := vmm.CreateOptions{Image: image, MemoryMiB: 1024, VCPUs: 2, Boot: boot}
	if image == "osworld" {
		o.MemoryMiB, o.Width, o.Height = 2048, 1920, 1080
	}
	return o
}

// steps are the task's five agent actions, as /execute bodies.
func steps(image string) [][]string {
	if image == "osworld" {
		const prefix = "import pyautogui; import time; pyautogui.FAILSAFE = False; "
		return [][]string{
			{"python", "-c", prefix + "pyautogui.click(400, 300)"},
			{"python", "-c", prefix + "pyautogui.hotkey('ctrl', 'end')"},
			{"python", "-c", prefix + "pyautogui.typewrite('task step three', interval=0.01)"},
			{"python", "-c", prefix + "pyautogui.press('enter')"},
			{"python", "-c", prefix + "pyautogui.hotkey('ctrl', 's')"},
		}
	}
	x := func(args string) []string {
		return []string{"python3", "-c", "import subprocess; subprocess.run(['xdotool', " + args + "], check=True)"}
	}
	return [][]string{
		x("'mousemove', '400', '300', 'click', '1'"),
		x("'key', 'ctrl+End'"),
		x("'type', '--delay', '10', 'task step three'"),
		x("'key', 'Return'"),
		x("'key', 'ctrl+s'"),
	}
}

type client struct{ url string }

func (c client) post(path, ctype string, body []byte) ([]byte, error) {
	resp, err := http.Post(c.url+path, ctype, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		return b, fmt.Errorf("POST %s: %s: %s", path, resp.Status, b)
	}
	return b, nil
}

func (c client) json(path string, v any) ([]byte, error) {
	b, _ := json.Marshal(v)
	return c.post(path, "application/json", b)
}

// task runs setup, steps and the getter of one task.
func (c client) task(image string, i int) error {
	name := fmt.Sprintf("task-%d.txt", i)
	doc := bytes.Repeat([]byte(fmt.Sprintf("line of task %d\n", i)), 2000)
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	mw.WriteField("file_path", "/home/user/"+name)
	fw, _ := mw.CreateFormFile("file_data", name)
	fw.Write(doc)
	mw.Close()
	if _, err := c.post("/setup/upload", mw.FormDataContentType(), body.Bytes()); err != nil {
		return err
	}
	if image != "osworld" {
		// The desktop image has no xdg-open: pcmanfm opens the file with
		// the application the user's mimeapps.list names.
		var mb bytes.Buffer
		mw := multipart.NewWriter(&mb)
		mw.WriteField("file_path", "/home/user/.config/mimeapps.list")
		fw, _ := mw.CreateFormFile("file_data", "mimeapps.list")
		fw.Write([]byte("[Default Applications]\ntext/plain=org.xfce.mousepad.desktop\n"))
		mw.Close()
		if _, err := c.post("/setup/upload", mw.FormDataContentType(), mb.Bytes()); err != nil {
			return err
		}
	}
	term := "lxterminal"
	if image == "osworld" {
		term = "xterm"
	}
	if _, err := c.json("/setup/launch", map[string]any{"command": []string{term}}); err != nil {
		return err
	}
	if _, err := c.json("/setup/open_file", map[string]any{"path": "/home/user/" + name}); err != nil {
		return err
	}
	for _, s := range steps(image) {
		b, err := c.json("/execute", map[string]any{"command": s, "shell": false})
		if err != nil {
			return err
		}
		var out struct{ ReturnCode int }
		if json.Unmarshal(b, &out); out.ReturnCode != 0 {
			return fmt.Errorf("step %q: %s", s, b)
		}
	}
	got, err := c.post("/file", "application/x-www-form-urlencoded", []byte(url.Values{"file_path": {"/home/user/" + name}}.Encode()))
	if err != nil {
		return err
	}
	if len(got) < len(doc) {
		return fmt.Errorf("getter: %d bytes, want at least %d", len(got), len(doc))
	}
	return nil
}

func serve(m *vmm.Manager, desks *desk.Pool, vm string) (client, func()) {
	h := osworld.NewHandler(&osworld.VMGuest{Farm: m, Desks: desks, VM: vm}, osworld.Options{VM: vm})
	srv := httptest.NewServer(h)
	return client{srv.URL}, func() { srv.Close(); h.Close() }
}

func run(image string, n, nb int) error {
	ctx := context.Background()
	m, log, err := farm.Open(ctx, farm.DefaultStateDir)
	if err != nil {
		return err
	}
	defer m.Close()
	desks := desk.New(m, desk.Options{Log: log})
	defer desks.Close()

	// deskfarm: one VM, reset in place before each task (the first task
	// starts from the fresh VM, as a warm pool VM is at its ready state).
	fmt.Fprintln(os.Stderr, "creating the VM")
	vm, err := m.Create(ctx, spec(image, false))
	if err != nil {
		return err
	}
	c, stop := serve(m, desks, vm.ID)
	var ours, resets []time.Duration
	t0 := time.Now()
	for i := range n {
		t := time.Now()
		if i > 0 {
			if _, err := m.Reset(ctx, vm.ID); err != nil {
				return err
			}
			if err := desks.WaitReset(ctx, vm.ID, t); err != nil {
				return err
			}
			resets = append(resets, time.Since(t))
		}
		if err := c.task(image, i); err != nil {
			return fmt.Errorf("deskfarm task %d: %w", i, err)
		}
		ours = append(ours, time.Since(t))
		fmt.Fprintf(os.Stderr, "deskfarm task %d: %s\n", i, time.Since(t).Round(time.Millisecond))
	}
	oursWall := time.Since(t0)
	stop()
	if err := m.Destroy(ctx, vm.ID); err != nil {
		return err
	}

	// OSWorld's docker provider: a fresh VM booted for each task, removed after.
	var theirs []time.Duration
	t0 = time.Now()
	for i := range nb {
		t := time.Now()
		vm, err := m.Create(ctx, spec(image, true))
		if err != nil {
			return err
		}
		c, stop := serve(m, desks, vm.ID)
		err = c.task(image, i)
		stop()
		m.Destroy(ctx, vm.ID)
		if err != nil {
			return fmt.Errorf("fresh-VM task %d: %w", i, err)
		}
		theirs = append(theirs, time.Since(t))
		fmt.Fprintf(os.Stderr, "fresh-VM task %d: %s\n", i, time.Since(t).Round(time.Millisecond))
	}
	theirsWall := time.Since(t0)

	perHour := func(count int, wall time.Duration) float64 { return float64(count) / wall.Hours() }
	a, b := perHour(len(ours), oursWall), perHour(len(theirs), theirsWall)
	fmt.Printf("| %s image, 1 VM, OSWorld-shaped task | tasks | wall | tasks/hour | s/task median | ratio |\n|---|---|---|---|---|---|\n", image)
	fmt.Printf("| deskfarm (reset in place) | %d | %.0f s | %.0f | %.1f | %.1fx |\n", len(ours), oursWall.Seconds(), a, stats.Pct(ours, 50).Seconds(), a/b)
	fmt.Printf("| fresh VM per task (OSWorld docker style) | %d | %.0f s | %.0f | %.1f | 1.0x |\n", len(theirs), theirsWall.Seconds(), b, stats.Pct(theirs, 50).Seconds())
	if len(resets) > 0 {
		fmt.Printf("\nreset (to ready, desk released) median %s, p95 %s\n", stats.MS(stats.Pct(resets, 50)), stats.MS(stats.Pct(resets, 95)))
	}
	return nil
}

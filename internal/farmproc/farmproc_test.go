package farmproc

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"
)

func TestReadProcCountsAnFdWeOpen(t *testing.T) {
	before, err := ReadProc(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if before.RSSKiB <= 0 || before.Threads <= 0 {
		t.Fatalf("ReadProc of this test: %+v; want RSS and threads", before)
	}
	f, err := os.Open("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	after, err := ReadProc(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if after.FDs != before.FDs+1 || after.FDByKind["file"] != before.FDByKind["file"]+1 {
		t.Errorf("after opening a file: fds %d -> %d, files %d -> %d; want one more of each",
			before.FDs, after.FDs, before.FDByKind["file"], after.FDByKind["file"])
	}
}

// The exposition lines below are in client_golang's text format, as
// deskfarm serve's /metrics writes them (typed here, not captured).
func TestMetricFindsTheUnlabelledSeries(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "# HELP go_goroutines Number of goroutines that currently exist.\n"+
			"# TYPE go_goroutines gauge\n"+
			"go_goroutines_total_fake{x=\"1\"} 9\n"+
			"go_goroutines 31\n"+
			"go_memstats_heap_inuse_bytes 1.2345e+07\n")
	}))
	defer srv.Close()
	n, err := Goroutines(context.Background(), srv.URL)
	if err != nil || n != 31 {
		t.Errorf("Goroutines = %d, %v; want 31", n, err)
	}
	h, err := Metric(context.Background(), srv.URL, "go_memstats_heap_inuse_bytes")
	if err != nil || h != 12345000 {
		t.Errorf("heap = %g, %v; want 12345000", h, err)
	}
	if _, err := Metric(context.Background(), srv.URL, "process_open_fds"); err == nil {
		t.Error("a series the page lacks: no error")
	}
}

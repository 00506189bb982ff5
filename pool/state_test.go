package pool

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/deskfarm/deskfarm/internal/fill"
)

// Every Episode field reaches the state file and comes back: the episode is
// filled by reflection, so a field added to Episode and not to its record
// fails here.
func TestEpisodeRecordKeepsEveryField(t *testing.T) {
	var ep Episode
	fill.All(&ep)
	rec := recordOf(ep)
	for _, p := range fill.Converted(ep, rec, fill.Skip{}) {
		t.Error(p)
	}
	for _, p := range fill.Converted(ep, rec.episode(), fill.Skip{}) {
		t.Error(p)
	}

	sf := &stateFile{path: filepath.Join(t.TempDir(), StateFileName)}
	want := persisted{Version: stateVersion, Episodes: []Episode{ep}, Ended: []Episode{ep}}
	if err := sf.save(want); err != nil {
		t.Fatal(err)
	}
	got, err := sf.load()
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("state file round trip:\ngot  %+v\nwant %+v", got, want)
	}
}

// A state file as deskfarm wrote it before Episode lost its json tags loads
// with every field.
func TestStateFileOfOlderDeskfarmLoads(t *testing.T) {
	const old = `{
  "version": 2,
  "episodes": [
    {"id": "ep-1", "vm": "a1", "pool": "desktop", "state": "active", "warm": true, "boot_seconds": 2.5,
     "created_at": "2026-11-30T07:00:00Z", "expires_at": "2026-11-30T08:00:00Z", "ttl_s": 3600,
     "screenshot_size": "auto", "clean_start": true, "reset_before_lease_ms": 412}
  ],
  "ended": [
    {"id": "ep-0", "vm": "a0", "pool": "desktop", "state": "ended", "warm": false,
     "created_at": "2026-11-30T06:00:00Z", "expires_at": "2026-11-30T07:00:00Z", "ttl_s": 3600,
     "screenshot_size": "auto", "clean_start": true, "ended_at": "2026-11-30T06:30:00Z",
     "end_reason": "deleted", "reset_seconds": 0.4, "vm_replaced": true}
  ]
}`
	path := filepath.Join(t.TempDir(), StateFileName)
	if err := os.WriteFile(path, []byte(old), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := (&stateFile{path: path}).load()
	if err != nil {
		t.Fatal(err)
	}
	at := func(h, m int) time.Time { return time.Date(2026, 11, 30, h, m, 0, 0, time.UTC) }
	ended := at(6, 30)
	want := persisted{Version: 2,
		Episodes: []Episode{{ID: "ep-1", VM: "a1", Pool: "desktop", State: EpisodeActive, Warm: true, BootSeconds: 2.5,
			CreatedAt: at(7, 0), ExpiresAt: at(8, 0), TTLSeconds: 3600, ScreenshotSize: "auto", CleanStart: true, ResetBeforeLeaseMS: 412}},
		Ended: []Episode{{ID: "ep-0", VM: "a0", Pool: "desktop", State: EpisodeEnded, CreatedAt: at(6, 0), ExpiresAt: at(7, 0),
			TTLSeconds: 3600, ScreenshotSize: "auto", CleanStart: true, EndedAt: &ended, EndReason: ReasonDeleted,
			ResetSeconds: 0.4, VMReplaced: true}}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("old state file:\ngot  %+v\nwant %+v", got, want)
	}
}

package vocab

import (
	"testing"

	"github.com/deskfarm/deskfarm/player"
	"github.com/deskfarm/deskfarm/player/playertest"
)

// The fake guest is playertest's; these names keep the tests short.
var (
	newFake     = playertest.New
	checkEvents = playertest.CheckEvents
	presses     = playertest.Presses
	pt          = playertest.Pt
	maskLeft    = playertest.MaskLeft
	noShot      = player.RunOptions{Screenshot: player.ScreenshotNever}
)

// newTestExecutor returns an executor on f whose sleeps advance f's virtual
// clock instead of taking time.
func newTestExecutor(t *testing.T, f *playertest.Display, size player.ScreenshotSize) *player.Executor {
	t.Helper()
	e, err := player.NewExecutor(f, player.ExecutorConfig{Size: size, Sleep: f.Sleep})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// newGuestExecutor is newTestExecutor with a playertest.Guest.
func newGuestExecutor(t *testing.T, f *playertest.Display) (*player.Executor, *playertest.Guest) {
	t.Helper()
	g := &playertest.Guest{F: f}
	e, err := player.NewExecutor(f, player.ExecutorConfig{Guest: g, Sleep: f.Sleep})
	if err != nil {
		t.Fatal(err)
	}
	return e, g
}

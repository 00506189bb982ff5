package trajectory

import (
	"context"
	"image"
	"sync"
	"time"

	"github.com/deskfarm/deskfarm/actions"
	"github.com/deskfarm/deskfarm/api"
	"github.com/deskfarm/deskfarm/desk"
)

// A person's input during takeover becomes steps: the desk's HumanInputs
// feed a Coalescer (demo.go), and each action it completes is a step of
// actor person, kind demonstration, in native coordinates, its after the
// screen when the action completed.

type demoFeed struct {
	cancel func()
	done   chan struct{}
	once   sync.Once
}

// startDemo subscribes to the VM's people's input.
func (r *Recorder) startDemo() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	in, unsub, err := r.m.cfg.Desks.HumanInputs(ctx, r.meta.VM)
	if err != nil {
		r.log.Warn("trajectory without demonstrations", "id", r.id, "err", err)
		return
	}
	d := &demoFeed{cancel: unsub, done: make(chan struct{})}
	r.media.demo = d
	go r.demo(in, d.done)
}

// stopDemo unsubscribes (once: the writer's stop and its finish both
// call it) and waits for the last coalesced actions to be queued.
func (r *Recorder) stopDemo() {
	if d := r.media.demo; d != nil {
		d.once.Do(d.cancel)
		<-d.done
	}
}

func (r *Recorder) demo(in <-chan desk.HumanInput, done chan struct{}) {
	defer close(done)
	c := NewCoalescer()
	var before *image.RGBA
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		var timeout <-chan time.Time
		if at, ok := c.Pending(); ok {
			timer.Reset(max(0, time.Until(at)))
			timeout = timer.C
		}
		select {
		case ev, ok := <-in:
			if !ok {
				r.person(c.Flush(r.m.now()), &before)
				return
			}
			if before == nil {
				before = r.snap()
			}
			r.person(c.Feed(ev), &before)
		case now := <-timeout:
			r.person(c.Flush(now), &before)
		case <-r.quit:
			r.person(c.Flush(r.m.now()), &before)
			return
		}
		timer.Stop()
	}
}

// person queues each action as a step.
func (r *Recorder) person(acts []actions.Action, before **image.RGBA) {
	for _, a := range acts {
		after := r.snap()
		x, y := r.screen.CursorPos()
		r.enqueue(job{
			step: api.TrajectoryStep{
				Time: r.m.now(), Actor: api.ActorPerson, Kind: api.KindDemonstration,
				Cursor: &api.Point{X: x, Y: y}, ScreenshotSize: sizeText(r.native), NativeSize: sizeText(r.native),
			},
			actions: []actions.Action{a}, size: r.native, before: *before, afterNative: after,
		})
		*before = after
	}
	if len(acts) > 0 {
		*before = nil
	}
}

package web

import (
	"github.com/deskfarm/deskfarm/api"
	"github.com/deskfarm/deskfarm/desk"
)

// ActivityEvent is a wire type (package api), converted from desk.Event.
type ActivityEvent = api.ActivityEvent

func activityEvent(e desk.Event) ActivityEvent {
	return ActivityEvent{Seq: e.Seq, Time: e.Time, Source: e.Source, Kind: e.Kind, X: e.X, Y: e.Y,
		FromX: e.FromX, FromY: e.FromY, Button: e.Button, Count: e.Count, Keys: e.Keys, Text: e.Text,
		Direction: e.Direction, Amount: e.Amount}
}

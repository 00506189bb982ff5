package web

import (
	"fmt"
	"testing"

	"github.com/deskfarm/deskfarm/cluster"
)

func TestPlanFork(t *testing.T) {
	rooms := []cluster.NodeRoom{{Node: "b", URL: "http://b", Room: 5}, {Node: "c", URL: "http://c", Room: 2}}
	for _, tc := range []struct {
		n, local int
		spread   bool
		want     string
		fits     int
	}{
		{8, 4, false, "[:4 b:4]", 8},
		{3, 4, false, "[:3]", 3},
		{11, 4, false, "[:4 b:5 c:2]", 11},
		{12, 4, false, "[]", 11},
		{6, 4, true, "[:2 b:2 c:2]", 6},
		{9, 1, true, "[]", 8},
		{7, 0, true, "[b:5 c:2]", 7},
		{3, -1, false, "[b:3]", 3}, // a pool over its max has no room
	} {
		plan, fits := planFork(tc.n, tc.local, rooms, tc.spread)
		got := "["
		total := 0
		for i, s := range plan {
			if i > 0 {
				got += " "
			}
			got += fmt.Sprintf("%s:%d", s.room.Node, s.count)
			total += s.count
			if s.count > max(s.room.Room, 0) {
				t.Errorf("%+v: share %d over room %d", tc, s.count, s.room.Room)
			}
		}
		got += "]"
		if plan != nil && total != tc.n {
			t.Errorf("%+v: plan %s makes %d", tc, got, total)
		}
		if got != tc.want || (plan == nil && fits != tc.fits) {
			t.Errorf("%+v: plan %s fits %d, want %s (fits %d)", tc, got, fits, tc.want, tc.fits)
		}
	}
}

package pool

import (
	"fmt"
	"strings"
	"testing"
)

// wantTable is the lease state machine written out by hand, one row per
// allowed (state, dirty, input): "state dirty input -> state dirty
// effects". dirty is "clean" or "dirty". Every combination not listed must
// be refused. It is spelled independently of transitions (lease.go) so that
// a change to either shows up here.
const wantTable = `
booting clean booted       -> warm clean wake
booting dirty booted       -> warm dirty wake
booting clean boot_failed  -> gone clean wake
booting dirty boot_failed  -> gone dirty wake
booting clean touch        -> booting dirty -
booting dirty touch        -> booting dirty -

warm clean lease           -> leased clean label+persist
warm clean clean           -> resetting clean unlabel+reset
warm dirty clean           -> resetting clean unlabel+reset
warm clean evict           -> destroying clean destroy
warm dirty evict           -> destroying dirty destroy
warm clean died            -> destroying clean wake+destroy
warm dirty died            -> destroying dirty wake+destroy
warm clean destroyed       -> gone clean wake
warm dirty destroyed       -> gone dirty wake
warm clean touch           -> warm dirty wake
warm dirty touch           -> warm dirty wake

leased clean abort         -> resetting clean wake+unlabel+reset
leased dirty abort         -> resetting clean wake+unlabel+reset
leased clean end           -> resetting clean unlabel+cancel_calls+reset+persist
leased dirty end           -> resetting clean unlabel+cancel_calls+reset+persist
leased clean died          -> destroying clean wake+cancel_calls+destroy+end_episode+persist
leased dirty died          -> destroying dirty wake+cancel_calls+destroy+end_episode+persist
leased clean destroyed     -> gone clean wake+cancel_calls+end_episode+persist
leased dirty destroyed     -> gone dirty wake+cancel_calls+end_episode+persist
leased clean touch         -> leased dirty -
leased dirty touch         -> leased dirty -

resetting clean reset_ok     -> warm clean wake
resetting dirty reset_ok     -> warm dirty wake
resetting clean reset_failed -> destroying clean destroy
resetting dirty reset_failed -> destroying dirty destroy
resetting clean died         -> resetting clean -
resetting dirty died         -> resetting dirty -
resetting clean destroyed    -> gone clean wake
resetting dirty destroyed    -> gone dirty wake
resetting clean touch        -> resetting dirty -
resetting dirty touch        -> resetting dirty -

destroying clean died      -> destroying clean -
destroying dirty died      -> destroying dirty -
destroying clean destroyed -> gone clean wake
destroying dirty destroyed -> gone dirty wake
destroying clean touch     -> destroying clean -
destroying dirty touch     -> destroying dirty -
`

type row struct {
	to    memberState
	dirty bool
	fx    string
}

func parseWant(t *testing.T) map[string]row {
	t.Helper()
	states, inputs := map[string]memberState{}, map[string]bool{}
	for s := memberState(0); s < numStates; s++ {
		states[s.String()] = s
	}
	for in := input(0); in < numInputs; in++ {
		inputs[in.String()] = true
	}
	want := map[string]row{}
	for _, line := range strings.Split(wantTable, "\n") {
		if strings.TrimSpace(line) == "" {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 7 || f[3] != "->" {
			t.Fatalf("bad want row %q", line)
		}
		if _, ok := states[f[0]]; !ok {
			t.Fatalf("row %q: unknown state", line)
		}
		if !inputs[f[2]] {
			t.Fatalf("row %q: unknown input", line)
		}
		to, ok := states[f[4]]
		if !ok {
			t.Fatalf("row %q: unknown state", line)
		}
		key := f[0] + " " + f[1] + " " + f[2]
		if _, dup := want[key]; dup {
			t.Fatalf("row %q twice", key)
		}
		fx := f[6]
		if fx == "-" {
			fx = ""
		}
		want[key] = row{to: to, dirty: f[5] == "dirty", fx: fx}
	}
	return want
}

// TestTransitionTable checks every state × dirty mark × input: the allowed
// ones land where wantTable says with its effects, every other one is
// refused and changes nothing.
func TestTransitionTable(t *testing.T) {
	want := parseWant(t)
	checked := 0
	for s := memberState(0); s < numStates; s++ {
		for _, dirty := range []bool{false, true} {
			for in := input(0); in < numInputs; in++ {
				mark := map[bool]string{false: "clean", true: "dirty"}[dirty]
				key := fmt.Sprintf("%s %s %s", s, mark, in)
				to, d, fx, err := step(s, dirty, in)
				w, allowed := want[key]
				checked++
				if !allowed {
					if err == nil {
						t.Errorf("%s: allowed (-> %s %v %s), want refused", key, to, d, fx)
					} else if to != s || d != dirty || fx != 0 {
						t.Errorf("%s: refused but changed to %s %v %s", key, to, d, fx)
					}
					continue
				}
				delete(want, key)
				if err != nil {
					t.Errorf("%s: refused (%v), want -> %s", key, err, w.to)
					continue
				}
				if to != w.to || d != w.dirty || fx.String() != w.fx {
					t.Errorf("%s: -> %s dirty=%v %q, want -> %s dirty=%v %q", key, to, d, fx, w.to, w.dirty, w.fx)
				}
			}
		}
	}
	for key := range want {
		t.Errorf("want row %q names no reachable combination", key)
	}
	if checked != int(numStates)*2*int(numInputs) {
		t.Fatalf("checked %d combinations", checked)
	}
}

// reachable returns the (state, dirty) pairs reachable from start with any
// sequence of inputs.
func reachable(start memberState, dirty bool) map[[2]int]bool {
	return reachableAvoiding(start, dirty, numStates)
}

// TestDeadWarmVMIsNeverLeased: once a warm VM died, no sequence of inputs
// leads it to leased.
func TestDeadWarmVMIsNeverLeased(t *testing.T) {
	for _, dirty := range []bool{false, true} {
		to, d, fx, err := step(stWarm, dirty, inDied)
		if err != nil || !fx.has(fxDestroy) {
			t.Fatalf("warm died: %s %v", fx, err)
		}
		if r := reachable(to, d); r[[2]int{int(stLeased), 0}] || r[[2]int{int(stLeased), 1}] {
			t.Fatalf("a dead warm vm can be leased: reachable %v", r)
		}
	}
}

// TestDirtyVMIsResetBeforeLease: a dirty member reaches leased only through
// a reset (resetting), never directly or by any path that avoids it.
func TestDirtyVMIsResetBeforeLease(t *testing.T) {
	if _, _, _, err := step(stWarm, true, inLease); err == nil {
		t.Fatal("a dirty warm vm was leased")
	}
	for s := memberState(0); s < numStates; s++ {
		if s == stResetting {
			continue
		}
		// Remove resetting from the graph: from a dirty member, leased must
		// then be unreachable.
		r := reachableAvoiding(s, true, stResetting)
		if (r[[2]int{int(stLeased), 0}] || r[[2]int{int(stLeased), 1}]) && s != stLeased {
			t.Errorf("dirty %s reaches a clean lease without a reset", s)
		}
	}
	// And the reset path works: dirty warm -clean-> resetting -reset_ok-> warm clean -lease-> leased.
	s, d := stWarm, true
	for _, in := range []input{inClean, inResetOK, inLease} {
		var err error
		if s, d, _, err = step(s, d, in); err != nil {
			t.Fatalf("%s: %v", in, err)
		}
	}
	if s != stLeased || d {
		t.Fatalf("clean then lease: %s dirty=%v", s, d)
	}
}

// reachableAvoiding is reachable without passing through state avoid.
func reachableAvoiding(start memberState, dirty bool, avoid memberState) map[[2]int]bool {
	type node struct {
		s memberState
		d bool
	}
	seen := map[[2]int]bool{}
	queue := []node{{start, dirty}}
	for len(queue) > 0 {
		n := queue[0]
		queue = queue[1:]
		k := [2]int{int(n.s), map[bool]int{false: 0, true: 1}[n.d]}
		if seen[k] {
			continue
		}
		seen[k] = true
		for in := input(0); in < numInputs; in++ {
			if to, d, _, err := step(n.s, n.d, in); err == nil && to != avoid {
				queue = append(queue, node{to, d})
			}
		}
	}
	return seen
}

// TestGoneIsFinal: nothing leaves gone.
func TestGoneIsFinal(t *testing.T) {
	if r := reachable(stGone, false); len(r) != 1 {
		t.Fatalf("gone reaches %v", r)
	}
}

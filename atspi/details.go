package atspi

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/godbus/dbus/v5"
)

// detail asks a node's details, what OSWorld's XML carries of an object
// beyond its role, name and states (attributes, the screen box, text, Value,
// actions), as the node is built, and sets them on its node. Lost: it is
// on the screen but did not answer its box (an object past its lease, or
// disposed of, answers an error), which a fresh walk, asking a new object,
// would have.
func (a *appWalk) detail(ctx context.Context, x *walked) (lost bool) {
	n, it := x.node, x.it
	full := a.w.mode == ModeOSWorld
	var (
		wg      sync.WaitGroup
		attrs   map[string]string
		box     *[4]int32
		text    string
		value   []float64
		actions []struct{ Name, Desc, KB string }
	)
	do := func(f func()) {
		wg.Add(1)
		go func() { defer wg.Done(); f() }()
	}
	// LibreOffice's menu objects (the Value interface tells them from the
	// GTK menu items of its sidebar, which have none) share the facts of
	// their class: menus.go.
	vclMenu := a.vclMenus && vclMenuRoles[n.Role] && it.hasIface(ifValue)
	derive := vclMenu && !a.w.askDerived
	if full {
		do(func() {
			if derive {
				if m, ok := a.menuAttrs(ctx, n.Role, it.ref); ok {
					attrs = m
					return
				}
			}
			_ = a.call(ctx, it.ref, ifAccessible+".GetAttributes", nil, &attrs)
		})
	}
	if a.wantsBox(x) {
		do(func() {
			var e struct{ X, Y, W, H int32 }
			if a.call(ctx, it.ref, ifComponent+".GetExtents", []any{uint32(0)}, &e) == nil {
				box = &[4]int32{e.X, e.Y, e.W, e.H}
			}
		})
	}
	if it.hasIface(ifText) && (a.w.mode != ModeTerminal || n.Role == "terminal") {
		do(func() {
			// -1: to the end (atk_text_get_text), one call where
			// pyatspi makes two (characterCount, then getText).
			if a.call(ctx, it.ref, ifText+".GetText", []any{int32(0), int32(-1)}, &text) == nil {
				text = objectChars.Replace(text)
			}
		})
	}
	if full && it.hasIface(ifValue) {
		if it.bounds == nil && vclMenu {
			it.bounds = a.menuBounds(ctx, n.Role, it.ref)
		}
		// One Get per property, never GetAll (see basics).
		value = make([]float64, len(valueProps))
		for i, p := range valueProps {
			if i > 0 && it.bounds != nil {
				value[i] = it.bounds[i-1]
				continue
			}
			if i == 0 && derive {
				do(func() { value[0] = a.menuValue(ctx, n, it.ref) })
				continue
			}
			do(func() { value[i] = a.valueProp(ctx, it.ref, p[1]) })
		}
	}
	if full && it.hasIface(ifAction) {
		do(func() {
			if a.call(ctx, it.ref, ifAction+".GetActions", nil, &actions) != nil {
				return
			}
			// GetActions answers localized names; OSWorld's server
			// (pyatspi's getName) writes GetName's. An application
			// localizes a name the same way wherever it is, so a
			// localized name already asked is not asked again (GTK's
			// widgets: the terminal's 40 nodes with actions took 2
			// GetName calls in a walk of the bench scene). Chromium's
			// localized names are "" and LibreOffice's did not repeat,
			// so each of their actions was asked: 1,232 and 757 calls
			// there (a single flight per name changed neither).
			if len(actions) == 1 && actions[0].Name == "" && vclMenu {
				actions[0].Name, _ = a.menuAction(ctx, n.Role, it.ref)
				return
			}
			var wg sync.WaitGroup
			for i := range actions {
				if n, ok := a.actionNames.Load(actions[i].Name); ok && actions[i].Name != "" {
					actions[i].Name = n.(string)
					continue
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					var s string
					if a.call(ctx, it.ref, ifAction+".GetName", []any{int32(i)}, &s) == nil {
						a.actionNames.Store(actions[i].Name, s)
						actions[i].Name = s
					}
				}()
			}
			wg.Wait()
		})
	}
	wg.Wait()
	lost = box == nil && a.wantsBox(x)
	n.Text, n.Box = text, box
	keys := make([]string, 0, len(attrs))
	for k := range attrs {
		if k != "" {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		n.Attrs = append(n.Attrs, Attr{"attr:" + k, attrs[k]})
	}
	if box != nil {
		n.Attrs = append(n.Attrs, Attr{Key: "cp:screencoord"}, Attr{Key: "cp:size"})
		n.setBox(box)
	}
	if !full {
		return lost
	}
	if it.hasIface(ifImage) {
		n.Attrs = append(n.Attrs, Attr{"image", "true"})
	}
	if it.hasIface(ifSelection) {
		n.Attrs = append(n.Attrs, Attr{"selection", "true"})
	}
	for i, f := range value {
		if !math.IsNaN(f) {
			n.Attrs = append(n.Attrs, Attr{"val:" + valueProps[i][0], pyFloat(f)})
		}
	}
	for _, act := range actions {
		name := strings.ReplaceAll(act.Name, " ", "-")
		n.Attrs = append(n.Attrs, Attr{"act:" + name + "_desc", act.Desc}, Attr{"act:" + name + "_kb", act.KB})
	}
	return lost
}

// wantsBox says whether x's node carries a box: one visible and showing
// with the Component interface, but in the terminal's mode.
func (a *appWalk) wantsBox(x *walked) bool {
	return x.node.has("visible") && x.node.has("showing") && x.it.hasIface(ifComponent) && a.w.mode != ModeTerminal
}

// objectChars are the characters a text holds for its embedded objects
// and for what it cannot say, which OSWorld's XML leaves out.
var objectChars = strings.NewReplacer("\ufffc", "", "\ufffd", "")

// setBox sets n's box, and its attributes that say it: after its attr:
// attributes, as detail writes them, when it had none.
func (n *Node) setBox(box *[4]int32) {
	if n.Box == nil && !slices.ContainsFunc(n.Attrs, func(a Attr) bool { return a.Key == "cp:screencoord" }) {
		i := 0
		for i < len(n.Attrs) && strings.HasPrefix(n.Attrs[i].Key, "attr:") {
			i++
		}
		n.Attrs = slices.Insert(n.Attrs, i, Attr{Key: "cp:screencoord"}, Attr{Key: "cp:size"})
	}
	n.Box = box
	for i := range n.Attrs {
		switch n.Attrs[i].Key {
		case "cp:screencoord":
			n.Attrs[i].Value = fmt.Sprintf("(%d, %d)", box[0], box[1])
		case "cp:size":
			n.Attrs[i].Value = fmt.Sprintf("(%d, %d)", box[2], box[3])
		}
	}
}

// valueProp is r's Value property prop, NaN when it has none (a Get that
// fails: at-spi2-atk answers an error where the toolkit gives no number).
func (a *appWalk) valueProp(ctx context.Context, r objRef, prop string) float64 {
	var v dbus.Variant
	if a.call(ctx, r, ifProps+".Get", []any{ifValue, prop}, &v) == nil {
		if f, ok := v.Value().(float64); ok {
			return f
		}
	}
	return math.NaN()
}

// valueBounds are r's Value minimum, maximum and increment, asked at once
// (NaN for one it does not answer).
func (a *appWalk) valueBounds(ctx context.Context, r objRef) *[3]float64 {
	b := new([3]float64)
	var wg sync.WaitGroup
	for i, p := range valueProps[1:] {
		wg.Add(1)
		go func() { defer wg.Done(); b[i] = a.valueProp(ctx, r, p[1]) }()
	}
	wg.Wait()
	return b
}

// valueProps are the Value properties OSWorld's XML carries, by their
// attribute names: the current value first, then the bounds.
var valueProps = [...][2]string{{"value", "CurrentValue"}, {"min", "MinimumValue"}, {"max", "MaximumValue"}, {"step", "MinimumIncrement"}}

// pyFloat formats f as Python's str(float) does (OSWorld's server writes
// values with str()): the shortest repr, ".0" on whole numbers, exponent
// form below 1e-4 and from 1e16.
func pyFloat(f float64) string {
	switch {
	case math.IsInf(f, 1):
		return "inf"
	case math.IsInf(f, -1):
		return "-inf"
	case math.IsNaN(f):
		return "nan"
	}
	e := strconv.FormatFloat(f, 'e', -1, 64) // d.ddde±XX
	mant, exps, _ := strings.Cut(e, "e")
	exp, _ := strconv.Atoi(exps)
	if exp < -4 || exp >= 16 {
		sign := "+"
		if exp < 0 {
			sign, exp = "-", -exp
		}
		return fmt.Sprintf("%se%s%02d", mant, sign, exp)
	}
	s := strconv.FormatFloat(f, 'f', -1, 64)
	if !strings.Contains(s, ".") {
		s += ".0"
	}
	return s
}

package atspi

import (
	"context"
	"math"
)

// LibreOffice's menu objects: facts that are constants of their class,
// asked of the first object of a role and shared by the rest of the walk.

// vclMenuRoles are the roles of LibreOffice's menu objects: its menu
// items, their check and radio kinds, and the menus (VCLXAccessibleMenu,
// VCLXAccessibleMenuItem's subclass). Toolbar buttons, which answer the same
// bounds here, are not among them: their class is another's
// (VCLXAccessibleToolBoxItem).
var vclMenuRoles = map[string]bool{"menu item": true, "check menu item": true, "radio menu item": true, "menu": true}

// menuBounds are the Value bounds of LibreOffice's menu objects of role,
// asked of the first one and taken by the rest: VCLXAccessibleMenuItem's
// getMaximumValue and getMinimumValue are the constants 1 and 0, and its
// minimum increment names no item (LibreOffice core,
// accessibility/source/standard/vclxaccessiblemenuitem.cxx). Each item is
// still asked its current value (selected or not). In the bench scene
// (docs/benchmarks.md) all 662 such objects answered 1.0, 0.0 and 0.0;
// asking each was 3 calls an item, a sixth of LibreOffice's calls. Nil
// when the walk ends first.
func (a *appWalk) menuBounds(ctx context.Context, role string, r objRef) *[3]float64 {
	v, _ := a.perRole(ctx, "bounds "+role, func() (any, bool) {
		b := a.valueBounds(ctx, r)
		return b, !math.IsNaN(b[0]) && !math.IsNaN(b[1]) && !math.IsNaN(b[2])
	})
	b, _ := v.(*[3]float64)
	return b
}

// menuAction is the name of the one action of LibreOffice's menu objects
// of role, asked of the first one and taken by the rest.
// VCLXAccessibleMenuItem has one action, whose description is a constant
// (RID_STR_ACC_ACTION_SELECT, vclxaccessiblemenuitem.cxx), and LibreOffice's
// ATK wrapper names an action by its description, its localized name being
// always "" (vcl/unx/gtk3/a11y/atkaction.cxx); so each was asked, 662 calls
// in the bench scene.
func (a *appWalk) menuAction(ctx context.Context, role string, r objRef) (string, bool) {
	v, ok := a.perRole(ctx, "action "+role, func() (any, bool) {
		var s string
		err := a.call(ctx, r, ifAction+".GetName", []any{int32(0)}, &s)
		return s, err == nil
	})
	s, _ := v.(string)
	return s, ok
}

// menuAttrs are the attributes of LibreOffice's menu objects of role,
// asked of the first one and taken by the rest. LibreOffice's ATK wrapper
// answers the attributes of an object whose context implements
// XAccessibleExtendedAttributes, and none otherwise
// (vcl/unx/gtk3/a11y/atkwrapper.cxx, wrapper_get_attributes);
// VCLXAccessibleMenuItem and VCLXAccessibleMenu implement the context,
// component, text, action, value and (the menu) selection interfaces, not
// that one (accessibility/inc/standard/accessiblemenubasecomponent.hxx,
// vclxaccessiblemenuitem.hxx, vclxaccessiblemenu.hxx). In the bench scene
// all 662 answered none, one call each.
func (a *appWalk) menuAttrs(ctx context.Context, role string, r objRef) (map[string]string, bool) {
	v, ok := a.perRole(ctx, "attrs "+role, func() (any, bool) {
		var m map[string]string
		err := a.call(ctx, r, ifAccessible+".GetAttributes", nil, &m)
		return m, err == nil
	})
	m, _ := v.(map[string]string)
	return m, ok
}

// menuValue is the current value of LibreOffice's menu object n: 1 when
// it is selected, else 0. VCLXAccessibleMenuItem's getCurrentValue is 1
// exactly when IsSelected(), the test its state set adds SELECTED by
// (vclxaccessiblemenuitem.cxx; VCLXAccessibleMenu overrides neither). The
// first object of a role is asked, and the rule holds for the role only
// if its answer is the one its state gives; otherwise each is asked. In
// the bench scene that was 662 calls, a fifteenth of LibreOffice's.
func (a *appWalk) menuValue(ctx context.Context, n *Node, r objRef) float64 {
	want := 0.0
	if n.has("selected") {
		want = 1
	}
	var asked float64
	didAsk := false
	_, ok := a.perRole(ctx, "value "+n.Role, func() (any, bool) {
		asked, didAsk = a.valueProp(ctx, r, "CurrentValue"), true
		return nil, asked == want
	})
	switch {
	case didAsk: // this object was asked: the first, or the rule failed
		return asked
	case ok:
		return want
	}
	return a.valueProp(ctx, r, "CurrentValue") // the walk ended first
}

// perRole answers a fact the same for every object of a role: the first
// to ask computes it with ask and the others wait for it. When the first
// could not (ask's false), each asks its own. False when the walk ended
// first, or ask failed.
func (a *appWalk) perRole(ctx context.Context, key string, ask func() (any, bool)) (any, bool) {
	a.roleMu.Lock()
	if a.byRole == nil {
		a.byRole = map[string]*roleFact{}
	}
	e := a.byRole[key]
	first := e == nil
	if first {
		// The others of the role wait for the first: their details
		// are asked all at once as the menus are built.
		e = &roleFact{done: make(chan struct{})}
		a.byRole[key] = e
	}
	a.roleMu.Unlock()
	if !first {
		select {
		case <-e.done:
		case <-ctx.Done():
			return nil, false
		}
		if e.ok {
			return e.v, true
		}
		return ask()
	}
	e.v, e.ok = ask()
	close(e.done)
	return e.v, e.ok
}

// roleFact is a fact of a role's objects, once the first has answered it.
type roleFact struct {
	done chan struct{}
	v    any
	ok   bool
}

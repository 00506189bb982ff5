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

// Package fill sets every field of a value by reflection and finds the
// fields left zero, for tests of conversions between the core types and the
// wire types (package api): fill the source, convert, and a field the
// conversion dropped is one Zeros names. Each field gets its own value, so a
// conversion that swaps two fields of a kind shows in a comparison too.
package fill

import (
	"fmt"
	"reflect"
	"time"
)

var timeType = reflect.TypeOf(time.Time{})

// All sets every exported field that ptr points to, recursively, to a
// non-zero value: numbers and strings distinct per field, one element in
// each slice and map, pointers to filled values. Interfaces and funcs are
// left alone.
func All(ptr any) {
	v := reflect.ValueOf(ptr)
	if v.Kind() != reflect.Pointer || v.IsNil() {
		panic("fill.All wants a non-nil pointer")
	}
	n := 0
	set(v.Elem(), &n, 0)
}

func set(v reflect.Value, n *int, depth int) {
	if depth > 8 {
		return // a recursive type: deep enough
	}
	*n++
	switch {
	case v.Type() == timeType:
		v.Set(reflect.ValueOf(time.Date(2026, 1, 1, 0, 0, *n, 0, time.UTC)))
		return
	}
	switch v.Kind() {
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(int64(*n % 100))
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		v.SetUint(uint64(*n % 100))
	case reflect.Float32, reflect.Float64:
		v.SetFloat(float64(*n) + 0.5)
	case reflect.String:
		v.SetString(fmt.Sprintf("s%d", *n))
	case reflect.Pointer:
		p := reflect.New(v.Type().Elem())
		set(p.Elem(), n, depth+1)
		v.Set(p)
	case reflect.Slice:
		s := reflect.MakeSlice(v.Type(), 1, 1)
		set(s.Index(0), n, depth+1)
		v.Set(s)
	case reflect.Array:
		for i := range v.Len() {
			set(v.Index(i), n, depth+1)
		}
	case reflect.Map:
		m := reflect.MakeMap(v.Type())
		k := reflect.New(v.Type().Key()).Elem()
		e := reflect.New(v.Type().Elem()).Elem()
		set(k, n, depth+1)
		set(e, n, depth+1)
		m.SetMapIndex(k, e)
		v.Set(m)
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				set(v.Field(i), n, depth+1)
			}
		}
	}
}

// Zeros returns the paths ("Forwards[0].HostPort") of the exported fields
// of v that are zero, nil or empty, except those named in except (top-level
// field names, or full paths).
func Zeros(v any, except ...string) []string {
	skip := map[string]bool{}
	for _, e := range except {
		skip[e] = true
	}
	var out []string
	zeros(reflect.ValueOf(v), "", skip, &out, 0)
	return out
}

func zeros(v reflect.Value, path string, skip map[string]bool, out *[]string, depth int) {
	if skip[path] || depth > 8 {
		return
	}
	if v.Type() == timeType {
		if v.Interface().(time.Time).IsZero() {
			*out = append(*out, path)
		}
		return
	}
	switch v.Kind() {
	case reflect.Interface, reflect.Func, reflect.Chan:
		return
	case reflect.Pointer:
		if v.IsNil() {
			*out = append(*out, path)
			return
		}
		zeros(v.Elem(), path, skip, out, depth+1)
	case reflect.Slice, reflect.Map:
		if v.Len() == 0 {
			*out = append(*out, path)
			return
		}
		if v.Kind() == reflect.Slice {
			for i := range v.Len() {
				zeros(v.Index(i), fmt.Sprintf("%s[%d]", path, i), skip, out, depth+1)
			}
			return
		}
		for _, k := range v.MapKeys() {
			zeros(v.MapIndex(k), fmt.Sprintf("%s[%v]", path, k), skip, out, depth+1)
		}
	case reflect.Struct:
		for i := range v.NumField() {
			f := v.Type().Field(i)
			if !f.IsExported() {
				continue
			}
			p := f.Name
			if path != "" {
				p = path + "." + f.Name
			}
			if skip[f.Name] {
				continue
			}
			zeros(v.Field(i), p, skip, out, depth+1)
		}
	default:
		if v.IsZero() {
			*out = append(*out, path)
		}
	}
}

// Mismatches compares the fields a and b have by the same name, recursively,
// and returns the paths where their values differ (leaves compared as
// printed, so a vmm.State and a string of the same text agree). Fields only
// one side has are not compared: Zeros finds those left unset.
func Mismatches(a, b any) []string {
	var out []string
	mismatches(reflect.ValueOf(a), reflect.ValueOf(b), "", &out, 0)
	return out
}

func mismatches(a, b reflect.Value, path string, out *[]string, depth int) {
	if depth > 8 {
		return
	}
	for a.Kind() == reflect.Pointer || b.Kind() == reflect.Pointer {
		if a.Kind() == reflect.Pointer {
			if a.IsNil() {
				break
			}
			a = a.Elem()
		}
		if b.Kind() == reflect.Pointer {
			if b.IsNil() {
				break
			}
			b = b.Elem()
		}
	}
	switch {
	case a.Type() == timeType && b.Type() == timeType:
		if !a.Interface().(time.Time).Equal(b.Interface().(time.Time)) {
			*out = append(*out, path)
		}
	case a.Kind() == reflect.Struct && b.Kind() == reflect.Struct:
		for i := range a.NumField() {
			f := a.Type().Field(i)
			if !f.IsExported() {
				continue
			}
			if f.Anonymous && f.Type.Kind() == reflect.Struct {
				if _, ok := b.Type().FieldByName(f.Name); !ok {
					// Promoted fields are compared as the other side's own.
					mismatches(a.Field(i), b, path, out, depth+1)
					continue
				}
			}
			bf := b.FieldByName(f.Name)
			if !bf.IsValid() {
				continue
			}
			p := f.Name
			if path != "" {
				p = path + "." + f.Name
			}
			mismatches(a.Field(i), bf, p, out, depth+1)
		}
	case a.Kind() == reflect.Slice && b.Kind() == reflect.Slice:
		if a.Len() != b.Len() {
			*out = append(*out, path)
			return
		}
		for i := range a.Len() {
			mismatches(a.Index(i), b.Index(i), fmt.Sprintf("%s[%d]", path, i), out, depth+1)
		}
	default:
		if fmt.Sprint(a.Interface()) != fmt.Sprint(b.Interface()) {
			*out = append(*out, path)
		}
	}
}

// Missing returns the paths of the exported fields of src (a struct) that
// dst has no field of the same name for, recursively through structs and
// slices of structs, except those named in except (renamed on the way, say).
// A field added to a core type and not to its wire type is one of these.
func Missing(src, dst any, except ...string) []string {
	skip := map[string]bool{}
	for _, e := range except {
		skip[e] = true
	}
	var out []string
	missing(reflect.TypeOf(src), reflect.TypeOf(dst), "", skip, &out, 0)
	return out
}

func missing(a, b reflect.Type, path string, skip map[string]bool, out *[]string, depth int) {
	for a.Kind() == reflect.Pointer || a.Kind() == reflect.Slice {
		a = a.Elem()
	}
	for b.Kind() == reflect.Pointer || b.Kind() == reflect.Slice {
		b = b.Elem()
	}
	if depth > 8 || a.Kind() != reflect.Struct || b.Kind() != reflect.Struct || a == timeType {
		return
	}
	for i := range a.NumField() {
		f := a.Field(i)
		if !f.IsExported() {
			continue
		}
		p := f.Name
		if path != "" {
			p = path + "." + f.Name
		}
		if skip[p] {
			continue
		}
		bf, ok := b.FieldByName(f.Name)
		if !ok && f.Anonymous && f.Type.Kind() == reflect.Struct {
			missing(f.Type, b, path, skip, out, depth+1)
			continue
		}
		if !ok {
			*out = append(*out, p)
			continue
		}
		missing(f.Type, bf.Type, p, skip, out, depth+1)
	}
}

// Skip names the fields Converted does not hold against a conversion.
type Skip struct {
	// Unset are fields of dst the conversion does not fill from src (the
	// caller sets them from elsewhere).
	Unset []string
	// Renamed are fields of src that reach dst under another name (the
	// test checks those itself).
	Renamed []string
}

// Converted checks that dst, converted from src after All(&src), holds all
// of it: no field of dst left zero (Zeros), none that differs from src's
// field of the same name (Mismatches), none of src without a field in dst
// (Missing). It returns what is wrong, one line each; nil means whole.
func Converted(src, dst any, skip Skip) []string {
	var out []string
	if z := Zeros(dst, skip.Unset...); len(z) != 0 {
		out = append(out, fmt.Sprintf("%T fields left unset: %v", dst, z))
	}
	if m := Mismatches(src, dst); len(m) != 0 {
		out = append(out, fmt.Sprintf("%T fields that differ from %T's: %v", dst, src, m))
	}
	if m := Missing(src, dst, skip.Renamed...); len(m) != 0 {
		out = append(out, fmt.Sprintf("%T fields %T lacks: %v", src, dst, m))
	}
	return out
}

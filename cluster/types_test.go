package cluster

import (
	"reflect"
	"sort"
	"testing"

	"github.com/deskfarm/deskfarm/deploy/kubernetes/crds"
	"github.com/deskfarm/deskfarm/internal/fill"
	"go.yaml.in/yaml/v3"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// crdSchema reads file's openAPIV3Schema.
func crdSchema(t *testing.T, file string) map[string]any {
	t.Helper()
	b, err := crds.FS.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var crd struct {
		Spec struct {
			Group    string
			Versions []struct {
				Name   string
				Schema struct {
					OpenAPIV3Schema map[string]any `yaml:"openAPIV3Schema"`
				}
			}
		}
	}
	if err := yaml.Unmarshal(b, &crd); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	if crd.Spec.Group != Group || len(crd.Spec.Versions) != 1 || crd.Spec.Versions[0].Name != Version {
		t.Fatalf("%s: group %q versions %+v, want %s/%s", file, crd.Spec.Group, crd.Spec.Versions, Group, Version)
	}
	return crd.Spec.Versions[0].Schema.OpenAPIV3Schema
}

// undeclared lists the paths of obj (an unstructured tree) that schema
// does not declare: a json tag that drifted from the CRD.
func undeclared(schema map[string]any, obj any, path string) []string {
	var out []string
	switch v := obj.(type) {
	case map[string]any:
		props, _ := schema["properties"].(map[string]any)
		for k, sub := range v {
			s, ok := props[k].(map[string]any)
			if !ok {
				out = append(out, path+"."+k)
				continue
			}
			out = append(out, undeclared(s, sub, path+"."+k)...)
		}
	case []any:
		items, _ := schema["items"].(map[string]any)
		for _, e := range v {
			out = append(out, undeclared(items, e, path+"[]")...)
		}
	}
	sort.Strings(out)
	return out
}

// TestTypesMatchSchemas fills every spec and status field, converts to
// unstructured and back: nothing is lost, and every key the Go types write
// is one the CRD's schema declares (a renamed json tag fails here, not as
// a field the apiserver silently prunes).
func TestTypesMatchSchemas(t *testing.T) {
	for _, tc := range []struct {
		file string
		obj  interface {
			Unstructured() (*unstructured.Unstructured, error)
		}
		back func(*unstructured.Unstructured) (any, error)
	}{
		{"desktops.yaml", &Desktop{}, func(u *unstructured.Unstructured) (any, error) { return DesktopFrom(u) }},
		{"desktoppools.yaml", &DesktopPool{}, func(u *unstructured.Unstructured) (any, error) { return DesktopPoolFrom(u) }},
		{"desktopclaims.yaml", &DesktopClaim{}, func(u *unstructured.Unstructured) (any, error) { return DesktopClaimFrom(u) }},
	} {
		t.Run(tc.file, func(t *testing.T) {
			v := reflect.ValueOf(tc.obj).Elem()
			for _, f := range []string{"Spec", "Status"} {
				fill.All(v.FieldByName(f).Addr().Interface())
			}
			u, err := tc.obj.Unstructured()
			if err != nil {
				t.Fatal(err)
			}
			schema := crdSchema(t, tc.file)
			for _, f := range []string{"spec", "status"} {
				props := schema["properties"].(map[string]any)
				if bad := undeclared(props[f].(map[string]any), u.Object[f], f); len(bad) != 0 {
					t.Errorf("fields not in %s's schema: %v", tc.file, bad)
				}
			}
			got, err := tc.back(u)
			if err != nil {
				t.Fatal(err)
			}
			gv := reflect.ValueOf(got).Elem()
			for _, f := range []string{"Spec", "Status"} {
				// Compared as printed: a time read back is in time.Local.
				if m := fill.Mismatches(gv.FieldByName(f).Interface(), v.FieldByName(f).Interface()); len(m) != 0 {
					t.Errorf("%s round trip differs at %v", f, m)
				}
			}
			if u.GetAPIVersion() != GroupVersion.String() {
				t.Errorf("apiVersion %q", u.GetAPIVersion())
			}
		})
	}
}

func TestDesktopName(t *testing.T) {
	for vm, want := range map[string]string{
		"tiny-3f2a":  "n1.tiny-3f2a",
		"VM_2":       "n1.vm-2",
		"desk.top-1": "n1.desk-top-1",
	} {
		if got := DesktopName("n1", vm); got != want {
			t.Errorf("DesktopName(n1, %q) = %q, want %q", vm, got, want)
		}
	}
}

package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// The names kubeconform's "{{ .ResourceKind }}{{ .KindSuffix }}.json" template asks for.
func TestFileNameFollowsKubeconform(t *testing.T) {
	for _, c := range []struct{ group, version, kind, want string }{
		{"", "v1", "Service", "service-v1.json"},
		{"apps", "v1", "StatefulSet", "statefulset-apps-v1.json"},
		{"policy", "v1", "PodDisruptionBudget", "poddisruptionbudget-policy-v1.json"},
		{"monitoring.coreos.com", "v1", "PodMonitor", "podmonitor-monitoring-v1.json"},
	} {
		if got := fileName(c.group, c.version, c.kind); got != c.want {
			t.Errorf("fileName(%q, %q, %q) = %q, want %q", c.group, c.version, c.kind, got, c.want)
		}
	}
}

func TestStrictClosesObjectsThatListTheirProperties(t *testing.T) {
	in := obj{
		"description": "dropped",
		"properties": obj{
			"description": obj{"type": "string"}, // a property named "description" stays
			"labels":      obj{"type": "object", "additionalProperties": obj{"type": "string"}},
			"raw":         obj{"type": "object", "x-kubernetes-preserve-unknown-fields": true, "properties": obj{}},
		},
	}
	want := obj{
		"additionalProperties": false,
		"properties": obj{
			"description": obj{"type": "string"},
			"labels":      obj{"type": "object", "additionalProperties": obj{"type": "string"}},
			"raw":         obj{"type": "object", "x-kubernetes-preserve-unknown-fields": true, "properties": obj{}},
		},
	}
	if got := strict(in); !reflect.DeepEqual(got, want) {
		t.Errorf("strict(%v)\n got %v\nwant %v", in, got, want)
	}
}

// A kind's file holds the definitions it references (transitively, recursion included), the
// two-shaped scalars accept both shapes, and apiVersion/kind are pinned.
func TestSwaggerKindIsStandalone(t *testing.T) {
	dir := t.TempDir()
	doc := obj{"definitions": obj{
		"io.k8s.api.core.v1.Service": obj{
			"properties": obj{
				"apiVersion": obj{"type": "string"},
				"kind":       obj{"type": "string"},
				"spec":       obj{"$ref": "#/definitions/io.k8s.api.core.v1.ServiceSpec"},
			},
			"x-kubernetes-group-version-kind": []any{obj{"group": "", "version": "v1", "kind": "Service"}},
		},
		"io.k8s.api.core.v1.ServiceSpec": obj{
			"properties": obj{
				"port": obj{"$ref": "#/definitions/io.k8s.apimachinery.pkg.util.intstr.IntOrString"},
				"self": obj{"$ref": "#/definitions/io.k8s.api.core.v1.ServiceSpec"},
			},
		},
		"io.k8s.apimachinery.pkg.util.intstr.IntOrString": obj{"type": "string", "format": "int-or-string"},
		"io.k8s.api.core.v1.Unused":                       obj{"type": "string"},
	}}
	data, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	swagger := filepath.Join(dir, "swagger.json")
	if err := os.WriteFile(swagger, data, 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out")
	if err := run(swagger, nil, out); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(out, "service-v1.json"))
	if err != nil {
		t.Fatal(err)
	}
	var got obj
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatal(err)
	}
	defs, _ := got["definitions"].(obj)
	if _, ok := defs["io.k8s.api.core.v1.ServiceSpec"]; !ok {
		t.Errorf("ServiceSpec missing from definitions: %v", defs)
	}
	if _, ok := defs["io.k8s.api.core.v1.Unused"]; ok {
		t.Errorf("an unreferenced definition was copied: %v", defs)
	}
	ios, _ := defs["io.k8s.apimachinery.pkg.util.intstr.IntOrString"].(obj)
	if _, ok := ios["oneOf"]; !ok {
		t.Errorf("IntOrString accepts one shape only: %v", ios)
	}
	kind := got["properties"].(obj)["kind"]
	if want := (obj{"type": "string", "enum": []any{"Service"}}); !reflect.DeepEqual(kind, want) {
		t.Errorf("kind = %v, want %v", kind, want)
	}
	if got["additionalProperties"] != false {
		t.Errorf("the kind's root object is open: %v", got)
	}
}

func TestDanglingReferenceIsAnError(t *testing.T) {
	dir := t.TempDir()
	swagger := filepath.Join(dir, "swagger.json")
	doc := `{"definitions": {"x.Thing": {"properties": {"a": {"$ref": "#/definitions/x.Missing"}},
		"x-kubernetes-group-version-kind": [{"group": "x", "version": "v1", "kind": "Thing"}]}}}`
	if err := os.WriteFile(swagger, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := run(swagger, nil, filepath.Join(dir, "out")); err == nil {
		t.Fatal("a dangling $ref produced a schema; kubeconform would report it as missing")
	}
}

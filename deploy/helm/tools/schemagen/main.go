// Command schemagen writes strict, standalone JSON schemas for kubeconform from the Kubernetes
// OpenAPI v2 document (api/openapi-spec/swagger.json of the k8s.io/kubernetes module) and from
// CustomResourceDefinition files, with no network access.
//
// Output: one file per kind and version, named as kubeconform's
// "{{ .ResourceKind }}{{ .KindSuffix }}.json" template expects (statefulset-apps-v1.json,
// service-v1.json, podmonitor-monitoring-v1.json). Each file holds the kind's schema plus, under
// "definitions", every definition it references, so that recursive types keep their $refs.
//
// Strict means: every object schema that lists its properties and says nothing about others
// gets "additionalProperties": false (unknown fields, such as a misspelt key in a values file,
// fail), and apiVersion/kind must be exactly the kind's.
//
//	go run . -swagger swagger.json -crd podmonitors.yaml -crd servicemonitors.yaml -out DIR
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"sigs.k8s.io/yaml"
)

type obj = map[string]any

// The two Kubernetes scalar types that JSON accepts in two shapes; swagger.json declares them as
// strings with a format, which would reject `port: 8080` or `cpu: 1`.
var special = map[string]obj{
	"io.k8s.apimachinery.pkg.util.intstr.IntOrString": {
		"oneOf": []any{obj{"type": "string"}, obj{"type": "integer"}},
	},
	"io.k8s.apimachinery.pkg.api.resource.Quantity": {
		"oneOf": []any{obj{"type": "string"}, obj{"type": "number"}},
	},
}

type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

func main() {
	swagger := flag.String("swagger", "", "Kubernetes OpenAPI v2 document (swagger.json)")
	var crds stringList
	flag.Var(&crds, "crd", "CustomResourceDefinition YAML file (repeatable)")
	out := flag.String("out", "", "output directory")
	flag.Parse()
	if *swagger == "" || *out == "" {
		fmt.Fprintln(os.Stderr, "usage: schemagen -swagger swagger.json [-crd file.yaml]... -out DIR")
		os.Exit(2)
	}
	if err := run(*swagger, crds, *out); err != nil {
		fmt.Fprintln(os.Stderr, "schemagen:", err)
		os.Exit(1)
	}
}

func run(swaggerPath string, crds []string, out string) error {
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	written := map[string]string{}
	write := func(file, what string, schema obj) error {
		if prev, dup := written[file]; dup {
			return fmt.Errorf("%s and %s both map to %s", prev, what, file)
		}
		written[file] = what
		data, err := json.Marshal(schema)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(out, file), data, 0o644)
	}

	n, err := fromSwagger(swaggerPath, write)
	if err != nil {
		return fmt.Errorf("%s: %w", swaggerPath, err)
	}
	fmt.Printf("%d built-in kinds from %s\n", n, swaggerPath)
	for _, path := range crds {
		n, err := fromCRD(path, write)
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		fmt.Printf("%d kind versions from %s\n", n, path)
	}
	return nil
}

// fileName is kubeconform's "{{ .ResourceKind }}{{ .KindSuffix }}.json" for group/version/kind.
func fileName(group, version, kind string) string {
	suffix := "-" + strings.ToLower(version)
	if group != "" {
		suffix = "-" + strings.ToLower(strings.Split(group, ".")[0]) + suffix
	}
	return strings.ToLower(kind) + suffix + ".json"
}

func apiVersion(group, version string) string {
	if group == "" {
		return version
	}
	return group + "/" + version
}

func fromSwagger(path string, write func(file, what string, schema obj) error) (int, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	var doc struct {
		Definitions map[string]obj `json:"definitions"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		return 0, err
	}
	if len(doc.Definitions) == 0 {
		return 0, fmt.Errorf("no definitions: not an OpenAPI v2 document")
	}
	defs := map[string]any{}
	for name, def := range doc.Definitions {
		if s, ok := special[name]; ok {
			defs[name] = s
			continue
		}
		defs[name] = strict(def)
	}
	names := make([]string, 0, len(doc.Definitions))
	for name := range doc.Definitions {
		names = append(names, name)
	}
	sort.Strings(names)
	count := 0
	for _, name := range names {
		gvks, _ := doc.Definitions[name]["x-kubernetes-group-version-kind"].([]any)
		for _, g := range gvks {
			gvk, _ := g.(obj)
			group, _ := gvk["group"].(string)
			version, _ := gvk["version"].(string)
			kind, _ := gvk["kind"].(string)
			if version == "" || kind == "" {
				return 0, fmt.Errorf("%s: incomplete x-kubernetes-group-version-kind %v", name, gvk)
			}
			root := deepCopy(defs[name]).(obj)
			pin(root, apiVersion(group, version), kind)
			used := map[string]any{}
			if err := collect(root, defs, used); err != nil {
				return 0, fmt.Errorf("%s: %w", name, err)
			}
			if len(used) > 0 {
				root["definitions"] = used
			}
			root["$schema"] = "http://json-schema.org/draft-04/schema#"
			if err := write(fileName(group, version, kind), name, root); err != nil {
				return 0, err
			}
			count++
		}
	}
	return count, nil
}

func fromCRD(path string, write func(file, what string, schema obj) error) (int, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	var crd struct {
		Kind string `json:"kind"`
		Spec struct {
			Group string `json:"group"`
			Names struct {
				Kind string `json:"kind"`
			} `json:"names"`
			Versions []struct {
				Name   string `json:"name"`
				Schema struct {
					OpenAPIV3Schema obj `json:"openAPIV3Schema"`
				} `json:"schema"`
			} `json:"versions"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(data, &crd); err != nil {
		return 0, err
	}
	if crd.Kind != "CustomResourceDefinition" {
		return 0, fmt.Errorf("kind %q: expected a CustomResourceDefinition", crd.Kind)
	}
	count := 0
	for _, v := range crd.Spec.Versions {
		if v.Schema.OpenAPIV3Schema == nil {
			return 0, fmt.Errorf("version %s has no openAPIV3Schema", v.Name)
		}
		root := strict(v.Schema.OpenAPIV3Schema).(obj)
		pin(root, apiVersion(crd.Spec.Group, v.Name), crd.Spec.Names.Kind)
		root["$schema"] = "http://json-schema.org/draft-04/schema#"
		if err := write(fileName(crd.Spec.Group, v.Name, crd.Spec.Names.Kind), path, root); err != nil {
			return 0, err
		}
		count++
	}
	return count, nil
}

// pin makes apiVersion and kind accept exactly this kind's values.
func pin(root obj, apiVersion, kind string) {
	props, _ := root["properties"].(obj)
	if props == nil {
		props = obj{}
		root["properties"] = props
	}
	props["apiVersion"] = obj{"type": "string", "enum": []any{apiVersion}}
	props["kind"] = obj{"type": "string", "enum": []any{kind}}
}

// strict returns a copy of an OpenAPI schema as a JSON schema that rejects unknown fields:
// descriptions dropped (size), "additionalProperties": false added to every object that lists
// its properties and neither allows others nor preserves unknown fields.
func strict(node any) any {
	switch n := node.(type) {
	case obj:
		out := obj{}
		for k, v := range n {
			switch k {
			case "description", "example", "externalDocs":
				continue
			case "properties", "patternProperties", "definitions":
				m, _ := v.(obj)
				props := obj{}
				for name, p := range m {
					props[name] = strict(p)
				}
				out[k] = props
			default:
				out[k] = strict(v)
			}
		}
		_, hasProps := n["properties"]
		_, hasAdditional := n["additionalProperties"]
		preserve, _ := n["x-kubernetes-preserve-unknown-fields"].(bool)
		if hasProps && !hasAdditional && !preserve {
			out["additionalProperties"] = false
		}
		return out
	case []any:
		out := make([]any, len(n))
		for i, v := range n {
			out[i] = strict(v)
		}
		return out
	default:
		return n
	}
}

// collect adds to used every definition node references, transitively.
func collect(node any, defs map[string]any, used map[string]any) error {
	switch n := node.(type) {
	case obj:
		if ref, ok := n["$ref"].(string); ok {
			name := strings.TrimPrefix(ref, "#/definitions/")
			if _, seen := used[name]; !seen {
				def, ok := defs[name]
				if !ok {
					// A dangling reference would make kubeconform's compile fail, and it reports
					// a failed compile as a missing schema: refuse here instead.
					return fmt.Errorf("unresolved $ref %s", ref)
				}
				used[name] = def
				if err := collect(def, defs, used); err != nil {
					return err
				}
			}
		}
		for k, v := range n {
			if k == "definitions" {
				continue
			}
			if err := collect(v, defs, used); err != nil {
				return err
			}
		}
	case []any:
		for _, v := range n {
			if err := collect(v, defs, used); err != nil {
				return err
			}
		}
	}
	return nil
}

func deepCopy(node any) any {
	switch n := node.(type) {
	case obj:
		out := obj{}
		for k, v := range n {
			out[k] = deepCopy(v)
		}
		return out
	case []any:
		out := make([]any, len(n))
		for i, v := range n {
			out[i] = deepCopy(v)
		}
		return out
	default:
		return n
	}
}

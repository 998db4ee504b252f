package v1alpha1_test

import (
	"os"
	"path/filepath"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"
)

// Every field of every CRD is documented, so that kubectl explain answers
// for each one. The CRDs are generated from the Go types' comments.
func TestEveryFieldIsDocumented(t *testing.T) {
	files, err := filepath.Glob("../../config/crd/bases/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no CRDs found: %v", err)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var crd apiextensionsv1.CustomResourceDefinition
		if err := yaml.Unmarshal(data, &crd); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		for _, v := range crd.Spec.Versions {
			for _, top := range []string{"spec", "status"} {
				prop, ok := v.Schema.OpenAPIV3Schema.Properties[top]
				if !ok {
					continue
				}
				checkDocumented(t, crd.Spec.Names.Kind+"."+top, prop)
			}
		}
	}
}

func checkDocumented(t *testing.T, path string, p apiextensionsv1.JSONSchemaProps) {
	t.Helper()
	if p.Description == "" {
		t.Errorf("%s has no description", path)
	}
	for name, child := range p.Properties {
		checkDocumented(t, path+"."+name, child)
	}
	if p.Items != nil && p.Items.Schema != nil && len(p.Items.Schema.Properties) > 0 {
		for name, child := range p.Items.Schema.Properties {
			checkDocumented(t, path+"[]."+name, child)
		}
	}
}

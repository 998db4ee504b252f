package v1alpha1_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/echring"
	"github.com/ringmaster-io/ringmaster/internal/keyring"
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

// The API's limits are those the domain and the agents enforce: a ring the
// API accepts is never one an agent refuses.
func TestLimitsAgreeWithTheDomain(t *testing.T) {
	data, err := os.ReadFile("../../config/crd/bases/ringmaster.io_ticketkeyrings.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.Unmarshal(data, &crd); err != nil {
		t.Fatal(err)
	}
	schema := crd.Spec.Versions[0].Schema.OpenAPIV3Schema
	retained := schema.Properties["spec"].Properties["retainedKeys"]
	if retained.Maximum == nil || int(*retained.Maximum) != keyring.MaxRetainedKeys {
		t.Errorf("spec.retainedKeys maximum = %v, want keyring.MaxRetainedKeys = %d", retained.Maximum, keyring.MaxRetainedKeys)
	}
	var nameRule bool
	for _, v := range schema.XValidations {
		nameRule = nameRule || strings.Contains(v.Rule, fmt.Sprintf("self.metadata.name.size() <= %d", v1alpha1.MaxRingNameLength))
	}
	if !nameRule {
		t.Errorf("no rule bounds metadata.name at %d characters", v1alpha1.MaxRingNameLength)
	}
	long := strings.Repeat("n", v1alpha1.MaxRingNameLength)
	for _, name := range []string{long, "shop/" + long} {
		if !keyring.ValidRingName(name) {
			t.Errorf("the agents refuse ring name %q, which the API accepts", name)
		}
	}
}

// An ECHKeyRing the API accepts holds no more configs than the agents take
// (echring.MaxConfigs: staged, published and the retired ones), and a public
// name the agents accept.
func TestECHLimitsAgreeWithTheDomain(t *testing.T) {
	data, err := os.ReadFile("../../config/crd/bases/ringmaster.io_echkeyrings.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.Unmarshal(data, &crd); err != nil {
		t.Fatal(err)
	}
	spec := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"]
	retained := spec.Properties["retainedConfigs"]
	if retained.Maximum == nil || int(*retained.Maximum)+2 != echring.MaxConfigs {
		t.Errorf("spec.retainedConfigs maximum = %v, want echring.MaxConfigs - 2 = %d", retained.Maximum, echring.MaxConfigs-2)
	}
	name := spec.Properties["publicName"]
	if name.MaxLength == nil || int(*name.MaxLength) != echring.MaxPublicNameLength {
		t.Errorf("spec.publicName maxLength = %v, want echring.MaxPublicNameLength = %d", name.MaxLength, echring.MaxPublicNameLength)
	}
	if !echring.ValidPublicName(strings.Repeat("a", 63) + "." + strings.Repeat("b", 63) + "." + strings.Repeat("c", 63) + "." + strings.Repeat("d", 61)) {
		t.Error("the agents refuse a public name of 253 characters, which the API accepts")
	}
}

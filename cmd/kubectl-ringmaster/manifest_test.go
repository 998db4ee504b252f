package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// TestKrewManifest checks plugins/ringmaster.yaml against the binary this
// package builds: krew installs it as kubectl-<name>, which kubectl runs as
// kubectl <name>.
func TestKrewManifest(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "plugins", "ringmaster.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			Name string `json:"name"`
		} `json:"metadata"`
		Spec struct {
			Version          string `json:"version"`
			Homepage         string `json:"homepage"`
			ShortDescription string `json:"shortDescription"`
			Description      string `json:"description"`
			Platforms        []struct {
				Selector struct {
					MatchLabels map[string]string `json:"matchLabels"`
				} `json:"selector"`
				URI    string `json:"uri"`
				SHA256 string `json:"sha256"`
				Bin    string `json:"bin"`
			} `json:"platforms"`
		} `json:"spec"`
	}
	if err := yaml.UnmarshalStrict(data, &m); err != nil {
		t.Fatal(err)
	}
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	binary := filepath.Base(wd)
	if m.APIVersion != "krew.googlecontainertools.github.com/v1alpha2" || m.Kind != "Plugin" || "kubectl-"+m.Metadata.Name != binary || m.Spec.ShortDescription == "" || m.Spec.Description == "" {
		t.Errorf("manifest %s %s %q: want a krew Plugin named for %s", m.APIVersion, m.Kind, m.Metadata.Name, binary)
	}
	if len(m.Spec.Platforms) == 0 {
		t.Fatal("no platform")
	}
	sha := regexp.MustCompile(`^[0-9a-f]{64}$`)
	for _, p := range m.Spec.Platforms {
		osArch := p.Selector.MatchLabels["os"] + "_" + p.Selector.MatchLabels["arch"]
		if p.Bin != binary || !sha.MatchString(p.SHA256) ||
			!strings.HasSuffix(p.URI, "/"+m.Spec.Version+"/"+binary+"_"+osArch+".tar.gz") {
			t.Errorf("platform %s: bin %q, uri %q, sha256 %q", osArch, p.Bin, p.URI, p.SHA256)
		}
	}
}

//go:build integration

package main

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// testImages are small images of two binaries each, so that building them
// twice for two architectures stays quick: what the test checks does not
// depend on which binaries they hold.
var testImages = []Image{{
	// ringmaster-agent links several modules (Prometheus' client,
	// fsnotify), which its SBOM must list.
	Name:       "agent",
	Repository: "registry.test/ringmaster-io/agent",
	Binaries:   map[string]string{"/ringmaster-agent": "./cmd/ringmaster-agent", "/pause": "./hack/cluster/pause"},
	Entrypoint: []string{"/ringmaster-agent"},
}, {
	Name:       "pause",
	Repository: "registry.test/ringmaster-io/pause",
	Binaries:   map[string]string{"/pause": "./hack/cluster/pause"},
	Entrypoint: []string{"/pause"},
}}

// sbomTool is cyclonedx-gomod, which make test builds (make sbom-tool).
func sbomTool(t *testing.T) string {
	t.Helper()
	p := os.Getenv("RINGMASTER_CYCLONEDX_GOMOD")
	if p == "" {
		t.Fatal("RINGMASTER_CYCLONEDX_GOMOD is unset: run make test-integration, or build it with make sbom-tool and set it to bin/cyclonedx-gomod")
	}
	return p
}

func testOptions(t *testing.T) Options {
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	return Options{Root: root, Out: t.TempDir(), Tag: "v9.8.7", Version: "v9.8.7", Arches: DefaultArches,
		Epoch: time.Unix(0, 0).UTC(), SBOMTool: sbomTool(t)}
}

// TestReproducible builds the images twice, into two directories, for
// linux/amd64 and linux/arm64, and requires the same index, image and SBOM
// digests and byte-identical tar files; then reads each image back from
// its tar file as a registry tool would, and its SBOMs against `go version
// -m` of the binaries in it.
func TestReproducible(t *testing.T) {
	ctx := context.Background()
	build := func() []Built {
		t.Helper()
		b, err := Build(ctx, testImages, testOptions(t))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	first, second := build(), build()
	for i := range first {
		a, b := first[i], second[i]
		if a.Digest != b.Digest {
			t.Errorf("%s: index digest %s, then %s from the same source", a.Name, a.Digest, b.Digest)
		}
		if !slices.Equal(a.Platforms, b.Platforms) {
			t.Errorf("%s: platforms %+v, then %+v", a.Name, a.Platforms, b.Platforms)
		}
		ta, err1 := os.ReadFile(a.Tar)
		tb, err2 := os.ReadFile(b.Tar)
		if err := errors.Join(err1, err2); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(ta, tb) {
			t.Errorf("%s: the two tar files differ", a.Name)
		}
		t.Logf("%s %s %s (%d bytes) %+v", a.Name, a.Ref, a.Digest, len(ta), a.Platforms)
		checkImage(t, a)
	}
}

// checkImage reads the index back from its OCI layout and checks each
// platform's image (the binaries alone, built for it, as a numeric non-root
// user) and its SBOM.
func checkImage(t *testing.T, b Built) {
	t.Helper()
	l, err := ReadLayout(b.Tar)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if l.Named.Digest != b.Digest || l.Named.Annotations[nameAnnotation] != b.Ref {
		t.Errorf("%s: the layout names %s %s, want %s %s", b.Name, l.Named.Annotations[nameAnnotation], l.Named.Digest, b.Ref, b.Digest)
	}
	im, err := l.Index.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if im.MediaType != types.OCIImageIndex || len(im.Manifests) != len(DefaultArches) {
		t.Fatalf("%s: index %s of %d manifests, want an OCI index of %d", b.Name, im.MediaType, len(im.Manifests), len(DefaultArches))
	}
	if len(l.Referrers) != len(DefaultArches) {
		t.Errorf("%s: %d referrers beside the index, want an SBOM per platform", b.Name, len(l.Referrers))
	}
	for i, m := range im.Manifests {
		arch := DefaultArches[i]
		if m.Platform == nil || m.Platform.OS != "linux" || m.Platform.Architecture != arch || m.Digest != b.Platforms[i].Digest {
			t.Fatalf("%s: manifest %d is %+v %s, want linux/%s %s", b.Name, i, m.Platform, m.Digest, arch, b.Platforms[i].Digest)
		}
		img, err := l.Index.Image(m.Digest)
		if err != nil {
			t.Fatal(err)
		}
		bins := checkPlatformImage(t, b, arch, img)
		if n := checkSBOM(t, b, l, b.Platforms[i], bins); n == 0 && b.Name == "agent" {
			t.Errorf("%s linux/%s: the SBOMs list no module: ringmaster-agent links several, so the comparison proves nothing", b.Name, arch)
		}
	}
}

// checkPlatformImage checks one platform's image and returns its binaries,
// written to a temporary directory (path in the image -> file).
func checkPlatformImage(t *testing.T, b Built, arch string, img v1.Image) map[string]string {
	t.Helper()
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.OS != "linux" || cf.Architecture != arch {
		t.Errorf("%s: config says %s/%s, want linux/%s", b.Name, cf.OS, cf.Architecture, arch)
	}
	if cf.Config.User != "65532:65532" {
		t.Errorf("%s: user %q, want 65532:65532", b.Name, cf.Config.User)
	}
	if !slices.Equal(cf.Config.Entrypoint, b.Entrypoint) {
		t.Errorf("%s: entrypoint %q, want %q", b.Name, cf.Config.Entrypoint, b.Entrypoint)
	}
	if !cf.Created.Equal(time.Unix(0, 0)) {
		t.Errorf("%s: created %s, want the epoch", b.Name, cf.Created.Time)
	}
	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("%s: %d layers (%v), want 1", b.Name, len(layers), err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	dir := t.TempDir()
	bins := map[string]string{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Uid != 0 || h.Mode != 0o555 || !h.ModTime.Equal(time.Unix(0, 0)) {
			t.Errorf("%s: %s uid %d mode %o mtime %s", b.Name, h.Name, h.Uid, h.Mode, h.ModTime)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		f := filepath.Join(dir, filepath.Base(h.Name))
		if err := os.WriteFile(f, data, 0o755); err != nil {
			t.Fatal(err)
		}
		bins["/"+h.Name] = f
	}
	if got, want := sortedKeys(bins), sortedKeys(b.Binaries); !slices.Equal(got, want) {
		t.Errorf("%s: layer holds %q, want only %q (no shell, nothing else)", b.Name, got, want)
	}
	return bins
}

// checkSBOM finds the platform's SBOM referrer in the layout and checks
// it against the binaries.
func checkSBOM(t *testing.T, b Built, l *Layout, p Platform, bins map[string]string) int {
	t.Helper()
	i := slices.IndexFunc(l.Referrers, func(d v1.Descriptor) bool { return d.Digest == p.SBOM })
	if i < 0 {
		t.Fatalf("%s linux/%s: no referrer %s in the layout", b.Name, p.Arch, p.SBOM)
	}
	if l.Referrers[i].ArtifactType != SBOMType {
		t.Errorf("%s linux/%s: the SBOM's descriptor has artifactType %q", b.Name, p.Arch, l.Referrers[i].ArtifactType)
	}
	art, err := l.Image(p.SBOM)
	if err != nil {
		t.Fatal(err)
	}
	return checkSBOMArtifact(t, b.Name+" linux/"+p.Arch, art, p.Digest, bins)
}

// checkSBOMArtifact checks an SBOM referrer about the image subject,
// whose binaries are bins (path in the image -> file): one CycloneDX
// document per binary, listing exactly the modules `go version -m` lists,
// at their versions. It returns how many modules they list.
func checkSBOMArtifact(t *testing.T, what string, art v1.Image, subject v1.Hash, bins map[string]string) int {
	t.Helper()
	m, err := art.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	if m.ArtifactType != SBOMType || m.Subject == nil || m.Subject.Digest != subject {
		t.Fatalf("%s: SBOM manifest of artifactType %q and subject %+v, want %s about %s", what, m.ArtifactType, m.Subject, SBOMType, subject)
	}
	var titles []string
	deps := 0
	for _, layer := range m.Layers {
		title := layer.Annotations[titleAnnotation]
		titles = append(titles, title)
		bin := bins["/"+strings.TrimSuffix(title, ".cdx.json")]
		if bin == "" {
			t.Errorf("%s: SBOM %s names no binary of the image", what, title)
			continue
		}
		blob, err := art.LayerByDigest(layer.Digest)
		if err != nil {
			t.Fatal(err)
		}
		rc, err := blob.Compressed()
		if err != nil {
			t.Fatal(err)
		}
		doc, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			t.Fatal(err)
		}
		main, mods := sbomModules(t, doc)
		wantMain, wantMods := goVersionM(t, bin)
		if main != wantMain {
			t.Errorf("%s %s: the SBOM's main module %q, go version -m's %q", what, title, main, wantMain)
		}
		if !slices.Equal(mods, wantMods) {
			t.Errorf("%s %s: the SBOM lists\n%q\ngo version -m lists\n%q", what, title, mods, wantMods)
		}
		deps += len(wantMods)
	}
	want := sortedKeys(bins)
	for i, w := range want {
		want[i] = filepath.Base(w) + ".cdx.json"
	}
	if slices.Sort(titles); !slices.Equal(titles, want) {
		t.Errorf("%s: SBOMs %q, want %q", what, titles, want)
	}
	t.Logf("%s: SBOMs %q list the %d modules go version -m lists", what, titles, deps)
	return deps
}

// sbomModules returns a CycloneDX SBOM's main component's name, and its
// Go module components as path@version, sorted.
func sbomModules(t *testing.T, doc []byte) (string, []string) {
	t.Helper()
	var bom struct {
		BOMFormat string `json:"bomFormat"`
		Metadata  struct {
			Component struct {
				Name string `json:"name"`
			} `json:"component"`
		} `json:"metadata"`
		Components []struct {
			Name    string `json:"name"`
			Version string `json:"version"`
			PURL    string `json:"purl"`
		} `json:"components"`
	}
	if err := json.Unmarshal(doc, &bom); err != nil {
		t.Fatalf("SBOM: %v", err)
	}
	if bom.BOMFormat != "CycloneDX" {
		t.Fatalf("SBOM of format %q, want CycloneDX", bom.BOMFormat)
	}
	var mods []string
	for _, c := range bom.Components {
		if strings.HasPrefix(c.PURL, "pkg:golang/") {
			mods = append(mods, c.Name+"@"+c.Version)
		}
	}
	slices.Sort(mods)
	return bom.Metadata.Component.Name, mods
}

// goVersionM returns the main module of a binary and its dependencies as
// path@version (a replaced module at its replacement's version), sorted,
// as `go version -m` prints them.
func goVersionM(t *testing.T, bin string) (string, []string) {
	t.Helper()
	out, err := exec.Command("go", "version", "-m", bin).Output()
	if err != nil {
		t.Fatalf("go version -m %s: %v", bin, err)
	}
	var main string
	var mods []string
	for line := range strings.SplitSeq(string(out), "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) >= 2 && f[0] == "mod":
			main = f[1]
		case len(f) >= 3 && f[0] == "dep":
			mods = append(mods, f[1]+"@"+f[2])
		case len(f) >= 3 && f[0] == "=>" && len(mods) > 0:
			mods[len(mods)-1] = strings.Split(mods[len(mods)-1], "@")[0] + "@" + f[2]
		}
	}
	slices.Sort(mods)
	return main, mods
}

//go:build integration

package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/ringmaster-io/ringmaster/internal/version"
)

// releaseTools are the tools hack/release.sh and this test use, which make
// test-integration builds: env variable -> the make target building it.
var releaseTools = map[string]string{
	"RINGMASTER_COSIGN":          "make cosign (hack/cosign.sh)",
	"RINGMASTER_COSIGN_KEY":      "hack/cosign.sh test-key (its cosign.key)",
	"RINGMASTER_REGISTRY":        "make registry (hack/registry.sh)",
	"RINGMASTER_HELM":            "make helm",
	"RINGMASTER_CYCLONEDX_GOMOD": "make sbom-tool",
}

func tool(t *testing.T, env string) string {
	t.Helper()
	v := os.Getenv(env)
	if v == "" {
		t.Fatalf("%s is unset: run make test-integration, which sets it (%s)", env, releaseTools[env])
	}
	return v
}

// TestRelease runs make release's script with the test key, for the pause
// image alone (quick to build for two architectures), then checks what a
// user gets: the checksums; the image pushed from the release's tar file
// into another registry verifying with cosign verify --key cosign.pub, for
// the index and each platform, with SBOMs read back through the referrers
// of each platform that match go version -m of the binaries pulled; an
// image tampered with under the same tag, and a tampered chart, failing
// verification.
func TestRelease(t *testing.T) {
	cosign, key, registryBin, helm, sbom := tool(t, "RINGMASTER_COSIGN"), tool(t, "RINGMASTER_COSIGN_KEY"),
		tool(t, "RINGMASTER_REGISTRY"), tool(t, "RINGMASTER_HELM"), tool(t, "RINGMASTER_CYCLONEDX_GOMOD")
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	out := filepath.Join(t.TempDir(), "release")
	cmd := exec.CommandContext(ctx, filepath.Join(root, "hack/release.sh"), out)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "COSIGN_KEY="+key, "COSIGN_PASSWORD=", "RELEASE_IMAGES=pause",
		"RINGMASTER_HELM="+helm, "RINGMASTER_CYCLONEDX_GOMOD="+sbom)
	report, err := cmd.CombinedOutput()
	t.Logf("hack/release.sh:\n%s", report)
	if err != nil {
		t.Fatalf("hack/release.sh: %v", err)
	}
	v := version.Version()
	chart := "ringmaster-" + strings.TrimPrefix(v, "v") + ".tgz"
	for _, want := range []string{"ringmaster " + v, "pause localhost/ringmaster-pause:" + v + " sha256:", "linux/amd64 sha256:", "linux/arm64 sha256:", chart} {
		if !strings.Contains(string(report), want) {
			t.Errorf("make release printed no %q", want)
		}
	}
	checkSums(t, out, []string{"images/pause.tar", chart, chart + ".sigstore.json", "cosign.pub"})
	pub := filepath.Join(out, "cosign.pub")

	reg := startRegistry(t, registryBin)
	p, err := Push(ctx, filepath.Join(out, "images/pause.tar"), reg)
	if err != nil {
		t.Fatal(err)
	}
	// An SBOM per platform, a signature of the index and of each platform.
	if want := 2*len(DefaultArches) + 1; p.Referrers != want {
		t.Errorf("the release's pause.tar carried %d referrers, want %d", p.Referrers, want)
	}
	repo := p.Ref.Context()
	verify := func(ref string) error {
		out, err := exec.CommandContext(ctx, cosign, "verify", "--key", pub, "--insecure-ignore-tlog=true", ref).CombinedOutput()
		if err != nil {
			return fmt.Errorf("cosign verify %s: %w\n%s", ref, err, out)
		}
		return nil
	}
	if err := verify(repo.Digest(p.Digest.String()).String()); err != nil {
		t.Error(err)
	}
	if err := verify(p.Ref.String()); err != nil {
		t.Error(err)
	}

	idx, err := remote.Index(p.Ref, remote.WithContext(ctx))
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != len(DefaultArches) {
		t.Fatalf("the index holds %d images, want %d", len(im.Manifests), len(DefaultArches))
	}
	for _, m := range im.Manifests {
		ref := repo.Digest(m.Digest.String())
		if err := verify(ref.String()); err != nil {
			t.Error(err)
		}
		rr, err := remote.Referrers(ref, remote.WithContext(ctx), remote.WithFilter("artifactType", SBOMType))
		if err != nil {
			t.Fatal(err)
		}
		rm, err := rr.IndexManifest()
		if err != nil {
			t.Fatal(err)
		}
		if len(rm.Manifests) != 1 {
			t.Fatalf("linux/%s: %d SBOM referrers, want 1", m.Platform.Architecture, len(rm.Manifests))
		}
		art, err := remote.Image(repo.Digest(rm.Manifests[0].Digest.String()), remote.WithContext(ctx))
		if err != nil {
			t.Fatal(err)
		}
		img, err := remote.Image(ref, remote.WithContext(ctx))
		if err != nil {
			t.Fatal(err)
		}
		b := Built{Image: Images[slices.IndexFunc(Images, func(im Image) bool { return im.Name == "pause" })]}
		bins := checkPlatformImage(t, b, m.Platform.Architecture, img)
		checkSBOMArtifact(t, "pause linux/"+m.Platform.Architecture+" from the registry", art, m.Digest, bins)
	}

	// Tampered: another index under the same tag, which nobody signed.
	tampered := mutate.Annotations(idx, map[string]string{"org.opencontainers.image.description": "tampered"}).(v1.ImageIndex)
	if err := remote.WriteIndex(p.Ref, tampered, remote.WithContext(ctx)); err != nil {
		t.Fatal(err)
	}
	if err := verify(p.Ref.String()); err == nil {
		t.Errorf("cosign verify passed an index tampered with under %s", p.Ref)
	} else {
		t.Logf("a tampered index fails: %v", lastLines(err.Error(), 2))
	}
	if err := verify(repo.Digest(p.Digest.String()).String()); err != nil {
		t.Errorf("the signed index no longer verifies: %v", err)
	}

	// The chart: its bundle verifies the .tgz, and not one byte changed.
	verifyBlob := func(file string) error {
		out, err := exec.CommandContext(ctx, cosign, "verify-blob", "--key", pub, "--insecure-ignore-tlog=true",
			"--bundle", filepath.Join(out, chart+".sigstore.json"), file).CombinedOutput()
		if err != nil {
			return fmt.Errorf("cosign verify-blob %s: %w\n%s", filepath.Base(file), err, out)
		}
		return nil
	}
	if err := verifyBlob(filepath.Join(out, chart)); err != nil {
		t.Error(err)
	}
	data, err := os.ReadFile(filepath.Join(out, chart))
	if err != nil {
		t.Fatal(err)
	}
	data[len(data)/2] ^= 1
	bad := filepath.Join(t.TempDir(), chart)
	if err := os.WriteFile(bad, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := verifyBlob(bad); err == nil {
		t.Error("cosign verify-blob passed a chart with one bit flipped")
	} else {
		t.Logf("a tampered chart fails: %v", lastLines(err.Error(), 2))
	}
}

// checkSums checks the release's SHA256SUMS: exactly the files, with
// their checksums.
func checkSums(t *testing.T, dir string, files []string) {
	t.Helper()
	sums, err := os.ReadFile(filepath.Join(dir, "SHA256SUMS"))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for line := range strings.SplitSeq(strings.TrimSpace(string(sums)), "\n") {
		sum, file, ok := strings.Cut(line, "  ")
		if !ok {
			t.Fatalf("SHA256SUMS line %q", line)
		}
		got[file] = sum
	}
	if len(got) != len(files) {
		t.Errorf("SHA256SUMS lists %d files, want %q", len(got), files)
	}
	for _, f := range files {
		data, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(data)
		if got[f] != hex.EncodeToString(sum[:]) {
			t.Errorf("SHA256SUMS says %s of %s, which is %x", got[f], f, sum)
		}
	}
}

// startRegistry runs the CNCF distribution registry on a loopback port
// until the test ends, and returns its address.
func startRegistry(t *testing.T, bin string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	dir := t.TempDir()
	config := filepath.Join(dir, "config.yml")
	if err := os.WriteFile(config, []byte(fmt.Sprintf("version: 0.1\nlog: {level: warn, accesslog: {disabled: true}}\nstorage:\n  filesystem: {rootdirectory: %s}\nhttp:\n  addr: %s\n", filepath.Join(dir, "data"), addr)), 0o644); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	cmd := exec.Command(bin, "serve", config)
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("registry:\n%s", logs.String())
		}
	})
	for range 100 {
		if _, err := remote.Catalog(context.Background(), mustRegistry(t, addr)); err == nil {
			return addr
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("the registry did not answer on %s:\n%s", addr, logs.String())
	return ""
}

func mustRegistry(t *testing.T, addr string) name.Registry {
	r, err := name.NewRegistry(addr)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

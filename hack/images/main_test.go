//go:build integration

package main

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/layout"
)

// TestReproducible builds the default images twice, into two directories,
// and requires the same manifest digests and byte-identical tar files; then
// reads one image back from its tar file as a registry tool would.
func TestReproducible(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the operator twice")
	}
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	sel, err := Select(root, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	build := func() []Built {
		t.Helper()
		b, err := Build(ctx, sel, Options{Root: root, Out: t.TempDir(), Tag: "test", Arch: "amd64", Epoch: time.Unix(0, 0).UTC()})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	first, second := build(), build()
	if len(first) < 2 {
		t.Fatalf("built %d images, want the operator and examples/server at least", len(first))
	}
	for i := range first {
		a, b := first[i], second[i]
		if a.Digest != b.Digest {
			t.Errorf("%s: digest %s, then %s from the same source", a.Name, a.Digest, b.Digest)
		}
		ta, err1 := os.ReadFile(a.Tar)
		tb, err2 := os.ReadFile(b.Tar)
		if err := errors.Join(err1, err2); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(ta, tb) {
			t.Errorf("%s: the two tar files differ", a.Name)
		}
		t.Logf("%s %s %s (%d bytes)", a.Name, a.Ref, a.Digest, len(ta))
		checkImage(t, a)
	}
}

// checkImage reads the image back from its OCI layout and checks what runs:
// the binaries alone, as a numeric non-root user.
func checkImage(t *testing.T, b Built) {
	t.Helper()
	dir := t.TempDir()
	if err := untar(b.Tar, dir); err != nil {
		t.Fatal(err)
	}
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != 1 || im.Manifests[0].Digest != b.Digest {
		t.Fatalf("%s: index %+v, want one manifest %s", b.Name, im.Manifests, b.Digest)
	}
	if got := im.Manifests[0].Annotations["io.containerd.image.name"]; got != b.Ref {
		t.Errorf("%s: io.containerd.image.name %q, want %q", b.Name, got, b.Ref)
	}
	img, err := idx.Image(b.Digest)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
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
	var files []string
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
		files = append(files, "/"+h.Name)
	}
	if want := sortedKeys(b.Binaries); !slices.Equal(files, want) {
		t.Errorf("%s: layer holds %q, want only %q (no shell, nothing else)", b.Name, files, want)
	}
}

func untar(src, dir string) error {
	f, err := os.Open(src)
	if err != nil {
		return err
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		path := dir + "/" + h.Name
		if h.Typeflag == tar.TypeDir {
			if err := os.MkdirAll(path, 0o755); err != nil {
				return err
			}
			continue
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			return err
		}
		if err := os.WriteFile(path, data, 0o644); err != nil {
			return err
		}
	}
}

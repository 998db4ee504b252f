// Command images builds ringmaster's container images without a container
// engine: each is one or more static Go binaries in a single layer, run as a
// numeric non-root user, with no shell and nothing else. Each image is
// written as an OCI image layout in a tar file (NAME.tar), which
// `ctr images import` and registry tools (crane, skopeo) read.
//
//	go run ./hack/images -out bin/images                 # the default set
//	go run ./hack/images -out bin/cluster pause          # one image by name
//
// The build is reproducible: the same source and Go toolchain give the same
// image digest. Binaries are built with CGO_ENABLED=0, -trimpath, no VCS
// stamp and an empty build id; every file in the layer and every timestamp of
// the image is fixed (SOURCE_DATE_EPOCH, or the Unix epoch); the tar files are
// written in a fixed order with fixed headers.
//
// It prints one line per image: name, reference and manifest digest.
package main

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// NonRoot is the user and group every image runs as: distroless's "nonroot".
const NonRoot = 65532

// Image is one image to build.
type Image struct {
	// Name names the image on the command line and its tar file.
	Name string
	// Repository is the image's name without tag; the tar file's index names
	// it Repository:tag.
	Repository string
	// Binaries maps a path in the image to the Go package built there. The
	// first in Entrypoint is the image's entrypoint.
	Binaries map[string]string
	// Entrypoint is the image's command.
	Entrypoint []string
	// Default is whether `make images` builds it.
	Default bool
	// Optional images are skipped while their package does not exist yet.
	Optional bool
}

// Images are every image this repository builds.
var Images = []Image{{
	Name:       "ringmaster",
	Repository: "ghcr.io/ringmaster-io/ringmaster",
	// ringmaster-check is what the chart's `helm test` runs.
	Binaries:   map[string]string{"/ringmaster": ".", "/ringmaster-check": "./cmd/ringmaster-check"},
	Entrypoint: []string{"/ringmaster"},
	Default:    true,
}, {
	Name:       "example-server",
	Repository: "ghcr.io/ringmaster-io/ringmaster-example-server",
	Binaries:   map[string]string{"/server": "./examples/server"},
	Entrypoint: []string{"/server"},
	Default:    true,
}, {
	// The sidecar for servers not written in Go (DESIGN: cmd/ringmaster-agent).
	Name:       "ringmaster-agent",
	Repository: "ghcr.io/ringmaster-io/ringmaster-agent",
	Binaries:   map[string]string{"/ringmaster-agent": "./cmd/ringmaster-agent"},
	Entrypoint: []string{"/ringmaster-agent"},
	Default:    true,
	Optional:   false,
}, {
	// The single-node cluster's sandbox image (hack/cluster), not a product.
	Name:       "pause",
	Repository: "localhost/ringmaster-pause",
	Binaries:   map[string]string{"/pause": "./hack/cluster/pause"},
	Entrypoint: []string{"/pause"},
}}

// Built is an image written by Build.
type Built struct {
	Image
	Ref    string  // Repository:tag
	Digest v1.Hash // of the image manifest
	Tar    string  // the OCI layout tar file
}

// Options configure Build.
type Options struct {
	// Root is the module's directory; Out where the tar files go.
	Root, Out string
	// Tag tags every image.
	Tag string
	// Arch is the GOARCH of the binaries and the image's platform.
	Arch string
	// Epoch is every timestamp of the images.
	Epoch time.Time
}

func main() {
	out := flag.String("out", "bin/images", "directory for the image tar files")
	tag := flag.String("tag", "dev", "tag of every image")
	arch := flag.String("arch", runtime.GOARCH, "GOARCH of the images")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: images [flags] [NAME...]\n\nImages (default: those marked *):\n")
		for _, im := range Images {
			mark := " "
			if im.Default {
				mark = "*"
			}
			fmt.Fprintf(flag.CommandLine.Output(), "  %s %-18s %s\n", mark, im.Name, im.Repository)
		}
		flag.PrintDefaults()
	}
	flag.Parse()
	if err := run(*out, *tag, *arch, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "images:", err)
		os.Exit(1)
	}
}

func run(out, tag, arch string, names []string) error {
	root, err := moduleRoot()
	if err != nil {
		return err
	}
	epoch, err := sourceDateEpoch()
	if err != nil {
		return err
	}
	sel, err := Select(root, names)
	if err != nil {
		return err
	}
	built, err := Build(context.Background(), sel, Options{Root: root, Out: out, Tag: tag, Arch: arch, Epoch: epoch})
	for _, b := range built {
		fmt.Printf("%s %s %s\n", b.Name, b.Ref, b.Digest)
	}
	return err
}

// sourceDateEpoch is SOURCE_DATE_EPOCH (reproducible-builds.org), or the
// Unix epoch.
func sourceDateEpoch() (time.Time, error) {
	s := os.Getenv("SOURCE_DATE_EPOCH")
	if s == "" {
		return time.Unix(0, 0).UTC(), nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("SOURCE_DATE_EPOCH %q: %w", s, err)
	}
	return time.Unix(n, 0).UTC(), nil
}

// Select returns the images named, or the default set when none is; an
// optional image whose package is missing is left out of the default set.
func Select(root string, names []string) ([]Image, error) {
	var out []Image
	if len(names) == 0 {
		for _, im := range Images {
			if im.Default && (!im.Optional || im.exists(root)) {
				out = append(out, im)
			}
		}
		return out, nil
	}
	for _, n := range names {
		i := slices.IndexFunc(Images, func(im Image) bool { return im.Name == n })
		if i < 0 {
			return nil, fmt.Errorf("no image %q (images -h lists them)", n)
		}
		out = append(out, Images[i])
	}
	return out, nil
}

func (im Image) exists(root string) bool {
	for _, pkg := range im.Binaries {
		if _, err := os.Stat(filepath.Join(root, pkg)); err != nil {
			return false
		}
	}
	return true
}

// Build compiles every binary of the images with one go build, then writes
// each image's tar file into opts.Out.
func Build(ctx context.Context, images []Image, opts Options) ([]Built, error) {
	if err := os.MkdirAll(opts.Out, 0o755); err != nil {
		return nil, err
	}
	work, err := os.MkdirTemp("", "ringmaster-images-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(work)
	bins, err := compile(ctx, opts, work, images)
	if err != nil {
		return nil, err
	}
	var built []Built
	for _, im := range images {
		b, err := write(im, bins, opts, work)
		if err != nil {
			return built, fmt.Errorf("image %s: %w", im.Name, err)
		}
		built = append(built, b)
	}
	return built, nil
}

// compile builds every package the images need into dir with one go build
// (they share their compiled packages), and returns each package's binary.
func compile(ctx context.Context, opts Options, dir string, images []Image) (map[string]string, error) {
	var pkgs []string
	for _, im := range images {
		for _, pkg := range im.Binaries {
			if !slices.Contains(pkgs, pkg) {
				pkgs = append(pkgs, pkg)
			}
		}
	}
	slices.Sort(pkgs)
	args := []string{"build", "-trimpath", "-buildvcs=false", "-ldflags=-s -w -buildid=", "-o", dir + string(filepath.Separator)}
	args = append(args, pkgs...)
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = opts.Root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+opts.Arch, "GOFLAGS=")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, out.String())
	}
	bins := map[string]string{}
	for _, pkg := range pkgs {
		name, err := binaryName(ctx, opts.Root, pkg)
		if err != nil {
			return nil, err
		}
		bins[pkg] = filepath.Join(dir, name)
	}
	return bins, nil
}

// binaryName is the file go build -o DIR/ writes for pkg: the last element
// of its import path.
func binaryName(ctx context.Context, root, pkg string) (string, error) {
	cmd := exec.CommandContext(ctx, "go", "list", "-f", "{{.ImportPath}}", pkg)
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go list %s: %w", pkg, err)
	}
	return filepath.Base(strings.TrimSpace(string(out))), nil
}

func write(im Image, bins map[string]string, opts Options, work string) (Built, error) {
	layer, err := binaryLayer(im, bins, opts.Epoch)
	if err != nil {
		return Built{}, err
	}
	img, err := mutate.Append(mutate.MediaType(empty.Image, types.OCIManifestSchema1), mutate.Addendum{
		Layer: layer,
		History: v1.History{
			Created:   v1.Time{Time: opts.Epoch},
			CreatedBy: "hack/images: " + strings.Join(sortedKeys(im.Binaries), " "),
			Comment:   "static Go binaries",
		},
	})
	if err != nil {
		return Built{}, err
	}
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	cf, err := img.ConfigFile()
	if err != nil {
		return Built{}, err
	}
	cf = cf.DeepCopy()
	cf.Created = v1.Time{Time: opts.Epoch}
	cf.OS, cf.Architecture = "linux", opts.Arch
	cf.Config = v1.Config{
		Entrypoint: im.Entrypoint,
		User:       fmt.Sprintf("%d:%d", NonRoot, NonRoot),
		WorkingDir: "/",
		Labels: map[string]string{
			"org.opencontainers.image.title":  im.Name,
			"org.opencontainers.image.source": "https://github.com/ringmaster-io/ringmaster",
		},
	}
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return Built{}, err
	}
	digest, err := img.Digest()
	if err != nil {
		return Built{}, err
	}

	ref := im.Repository + ":" + opts.Tag
	dir := filepath.Join(work, "layout-"+im.Name)
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return Built{}, err
	}
	if err := p.AppendImage(img,
		layout.WithPlatform(v1.Platform{OS: "linux", Architecture: opts.Arch}),
		layout.WithAnnotations(map[string]string{
			// containerd names the imported image after the first,
			// other tools after the second.
			"io.containerd.image.name":          ref,
			"org.opencontainers.image.ref.name": opts.Tag,
		})); err != nil {
		return Built{}, err
	}
	tarPath := filepath.Join(opts.Out, im.Name+".tar")
	if err := tarDir(dir, tarPath, opts.Epoch); err != nil {
		return Built{}, err
	}
	return Built{Image: im, Ref: ref, Digest: digest, Tar: tarPath}, nil
}

// binaryLayer is the image's one layer: its binaries, owned by root and
// executable by anyone, with every header field fixed.
func binaryLayer(im Image, bins map[string]string, epoch time.Time) (v1.Layer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, path := range sortedKeys(im.Binaries) {
		data, err := os.ReadFile(bins[im.Binaries[path]])
		if err != nil {
			return nil, err
		}
		hdr := &tar.Header{
			Typeflag: tar.TypeReg, Name: strings.TrimPrefix(path, "/"), Mode: 0o555, Size: int64(len(data)),
			ModTime: epoch, Format: tar.FormatPAX,
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, err
		}
		if _, err := tw.Write(data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	b := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(b)), nil
	}, tarball.WithMediaType(types.OCILayer))
}

// tarDir writes the files under dir into a tar file, in lexical order, with
// fixed headers.
func tarDir(dir, dst string, epoch time.Time) error {
	tmp := dst + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(f)
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || path == dir {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		hdr := &tar.Header{Name: filepath.ToSlash(rel), ModTime: epoch, Format: tar.FormatPAX}
		if d.IsDir() {
			hdr.Typeflag, hdr.Name, hdr.Mode = tar.TypeDir, hdr.Name+"/", 0o755
			return tw.WriteHeader(hdr)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		hdr.Typeflag, hdr.Mode, hdr.Size = tar.TypeReg, 0o644, int64(len(data))
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		_, err = tw.Write(data)
		return err
	})
	err = errors.Join(err, tw.Close(), f.Close())
	if err != nil {
		os.Remove(tmp)
		return err
	}
	return os.Rename(tmp, dst)
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func moduleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", errors.New("run inside the ringmaster module")
	}
	return filepath.Dir(gomod), nil
}

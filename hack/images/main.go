// Command images builds ringmaster's container images without a container
// engine: each is one or more static Go binaries in a single layer, run as a
// numeric non-root user, with no shell and nothing else. Each image is one
// OCI image index with an image per platform (linux/amd64 and linux/arm64
// unless -arch says otherwise; CGO_ENABLED=0 cross builds), written as an
// OCI image layout in a tar file (NAME.tar), which `ctr images import`
// (hack/cluster/load.sh) and registry tools read.
//
// With -sbom (the path of cyclonedx-gomod), each platform's image gets a
// CycloneDX SBOM of every binary in it, made by cyclonedx-gomod from the
// binary's own build information (the modules `go version -m` lists), and
// attached as an OCI referrer: a manifest of artifactType
// application/vnd.cyclonedx+json whose subject is that platform's image,
// with one layer per binary (titled NAME.cdx.json). The layout lists it
// beside the index.
//
//	go run ./hack/images -out bin/images -sbom bin/cyclonedx-gomod   # the default set
//	go run ./hack/images -out bin/cluster -arch amd64 pause          # one image by name
//	go run ./hack/images push -registry 127.0.0.1:5000 bin/images/*.tar
//	go run ./hack/images export -registry 127.0.0.1:5000 -out DIR bin/images/*.tar
//
// push copies each tar's index (tag and platforms) and its referrers to a
// registry, under the image's repository path (ghcr.io/ringmaster-io/x
// becomes REGISTRY/ringmaster-io/x). export writes, for each tar's image,
// what the registry holds now back into a tar: the index, its platforms and
// every referrer of each (SBOMs, and the signatures cosign pushed), for
// make release and air-gapped clusters.
//
// The build is reproducible: the same source and Go toolchain give the same
// digests. Binaries are built with CGO_ENABLED=0, -trimpath, no VCS stamp
// and an empty build id; every file in the layer and every timestamp of
// the image is fixed (SOURCE_DATE_EPOCH, or the Unix epoch); SBOMs have no
// serial number or timestamp; the tar files are written in a fixed order
// with fixed headers.
//
// It prints one line per image: name, reference and index digest, then
// one per platform: arch, image digest and SBOM digest.
package main

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
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

	"github.com/ringmaster-io/ringmaster/internal/version"
)

// NonRoot is the user and group every image runs as: distroless's "nonroot".
const NonRoot = 65532

const (
	// SBOMType is the artifactType of an SBOM referrer and the media type
	// of its layers.
	SBOMType = "application/vnd.cyclonedx+json"
	// emptyType is the OCI empty descriptor's media type: an artifact's
	// config, which holds "{}".
	emptyType = "application/vnd.oci.empty.v1+json"
	// nameAnnotation names an image in a layout for containerd, which
	// imports it under that name; refAnnotation is the tag, for other
	// tools.
	nameAnnotation  = "io.containerd.image.name"
	refAnnotation   = "org.opencontainers.image.ref.name"
	titleAnnotation = "org.opencontainers.image.title"
	// versionVar is the variable -ldflags -X sets to the version.
	versionVar = "github.com/ringmaster-io/ringmaster/internal/version.version"
)

// DefaultArches are the platforms (linux/ARCH) every image is built for.
var DefaultArches = []string{"amd64", "arm64"}

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
	Ref       string  // Repository:tag
	Digest    v1.Hash // of the image index
	Platforms []Platform
	Tar       string // the OCI layout tar file
}

// Platform is one platform's image of a Built index.
type Platform struct {
	Arch   string
	Digest v1.Hash // of the image manifest
	// SBOM is the digest of the SBOM referrer whose subject is the image;
	// zero without Options.SBOMTool.
	SBOM v1.Hash
}

// Options configure Build.
type Options struct {
	// Root is the module's directory; Out where the tar files go.
	Root, Out string
	// Tag tags every image.
	Tag string
	// Version is what the binaries' --version prints (-ldflags -X), and
	// the SBOMs' version of the main module.
	Version string
	// Arches are the GOARCHes of the binaries and the images' platforms,
	// in the index's order.
	Arches []string
	// Epoch is every timestamp of the images.
	Epoch time.Time
	// SBOMTool is cyclonedx-gomod's path; empty: no SBOMs.
	SBOMTool string
}

func main() {
	if len(os.Args) > 1 && (os.Args[1] == "push" || os.Args[1] == "export") {
		if err := registryMain(os.Args[1], os.Args[2:]); err != nil {
			fmt.Fprintf(os.Stderr, "images %s: %v\n", os.Args[1], err)
			os.Exit(1)
		}
		return
	}
	out := flag.String("out", "bin/images", "directory for the image tar files")
	tag := flag.String("tag", "dev", "tag of every image")
	ver := flag.String("version", version.Version(), "the version the binaries report (-ldflags -X) and the SBOMs name")
	arch := flag.String("arch", strings.Join(DefaultArches, ","), "GOARCHes of the images (linux), comma-separated: one index, one image each")
	sbom := flag.String("sbom", "", "cyclonedx-gomod's path: attach an SBOM to each platform's image (make images builds it)")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: images [flags] [NAME...]\n       images push|export -h\n\nImages (default: those marked *):\n")
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
	if err := run(*out, *tag, *ver, *arch, *sbom, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "images:", err)
		os.Exit(1)
	}
}

func run(out, tag, ver, arch, sbom string, names []string) error {
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
	arches, err := parseArches(arch)
	if err != nil {
		return err
	}
	built, err := Build(context.Background(), sel, Options{Root: root, Out: out, Tag: tag, Version: ver, Arches: arches, Epoch: epoch, SBOMTool: sbom})
	for _, b := range built {
		fmt.Printf("%s %s %s\n", b.Name, b.Ref, b.Digest)
		for _, p := range b.Platforms {
			sbom := "-"
			if p.SBOM != (v1.Hash{}) {
				sbom = "sbom=" + p.SBOM.String()
			}
			fmt.Printf("  linux/%s %s %s\n", p.Arch, p.Digest, sbom)
		}
	}
	return err
}

// parseArches splits a comma-separated list of GOARCHes.
func parseArches(s string) ([]string, error) {
	var out []string
	for a := range strings.SplitSeq(s, ",") {
		a = strings.TrimSpace(a)
		if a == "" || strings.ContainsAny(a, "/ ") {
			return nil, fmt.Errorf("-arch %q: want GOARCHes separated by commas, e.g. amd64,arm64", s)
		}
		if slices.Contains(out, a) {
			return nil, fmt.Errorf("-arch %q names %s twice", s, a)
		}
		out = append(out, a)
	}
	return out, nil
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

// Build compiles every binary of the images with one go build per
// architecture, then writes each image's tar file into opts.Out.
func Build(ctx context.Context, images []Image, opts Options) ([]Built, error) {
	if len(opts.Arches) == 0 {
		return nil, errors.New("no architecture to build for")
	}
	if err := os.MkdirAll(opts.Out, 0o755); err != nil {
		return nil, err
	}
	work, err := os.MkdirTemp("", "ringmaster-images-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(work)
	bins := map[string]map[string]string{} // arch -> package -> binary
	for _, arch := range opts.Arches {
		if bins[arch], err = compile(ctx, opts, arch, filepath.Join(work, arch), images); err != nil {
			return nil, err
		}
	}
	var built []Built
	for _, im := range images {
		b, err := write(ctx, im, bins, opts, work)
		if err != nil {
			return built, fmt.Errorf("image %s: %w", im.Name, err)
		}
		built = append(built, b)
	}
	return built, nil
}

// compile builds every package the images need for arch into dir with one
// go build (they share their compiled packages), and returns each
// package's binary.
func compile(ctx context.Context, opts Options, arch, dir string, images []Image) (map[string]string, error) {
	var pkgs []string
	for _, im := range images {
		for _, pkg := range im.Binaries {
			if !slices.Contains(pkgs, pkg) {
				pkgs = append(pkgs, pkg)
			}
		}
	}
	slices.Sort(pkgs)
	ldflags := "-s -w -buildid="
	if opts.Version != "" {
		ldflags += " -X " + versionVar + "=" + opts.Version
	}
	args := []string{"build", "-trimpath", "-buildvcs=false", "-ldflags=" + ldflags, "-o", dir + string(filepath.Separator)}
	args = append(args, pkgs...)
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = opts.Root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch, "GOFLAGS=")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("GOARCH=%s go %s: %w\n%s", arch, strings.Join(args, " "), err, out.String())
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

// write makes the image's index, one image per architecture, and their
// SBOMs, and writes them as one OCI layout into the image's tar file.
func write(ctx context.Context, im Image, bins map[string]map[string]string, opts Options, work string) (Built, error) {
	ref := im.Repository + ":" + opts.Tag
	b := Built{Image: im, Ref: ref, Tar: filepath.Join(opts.Out, im.Name+".tar")}
	var adds []mutate.IndexAddendum
	var sboms []artifact
	for _, arch := range opts.Arches {
		img, err := platformImage(im, bins[arch], arch, opts.Epoch)
		if err != nil {
			return b, err
		}
		p := Platform{Arch: arch}
		if p.Digest, err = img.Digest(); err != nil {
			return b, err
		}
		if opts.SBOMTool != "" {
			a, err := sbomArtifact(ctx, opts, im, bins[arch], img)
			if err != nil {
				return b, fmt.Errorf("SBOM of linux/%s: %w", arch, err)
			}
			p.SBOM = a.desc.Digest
			sboms = append(sboms, a)
		}
		b.Platforms = append(b.Platforms, p)
		adds = append(adds, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: arch}}})
	}
	idx := mutate.AppendManifests(mutate.IndexMediaType(empty.Index, types.OCIImageIndex), adds...)
	idx = mutate.Annotations(idx, map[string]string{
		"org.opencontainers.image.version": opts.Version,
		"org.opencontainers.image.source":  "https://github.com/ringmaster-io/ringmaster",
		"org.opencontainers.image.created": opts.Epoch.Format(time.RFC3339),
	}).(v1.ImageIndex)
	var err error
	if b.Digest, err = idx.Digest(); err != nil {
		return b, err
	}

	dir := filepath.Join(work, "layout-"+im.Name)
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return b, err
	}
	// containerd names the imported image after the first annotation,
	// other tools after the second.
	if err := p.AppendIndex(idx, layout.WithAnnotations(map[string]string{nameAnnotation: ref, refAnnotation: opts.Tag})); err != nil {
		return b, err
	}
	for _, a := range sboms {
		if err := a.writeTo(p); err != nil {
			return b, err
		}
	}
	return b, tarDir(dir, b.Tar, opts.Epoch)
}

// platformImage is the image of one architecture: one layer of its
// binaries, the entrypoint, the non-root user.
func platformImage(im Image, bins map[string]string, arch string, epoch time.Time) (v1.Image, error) {
	layer, err := binaryLayer(im, bins, epoch)
	if err != nil {
		return nil, err
	}
	img, err := mutate.Append(mutate.MediaType(empty.Image, types.OCIManifestSchema1), mutate.Addendum{
		Layer: layer,
		History: v1.History{
			Created:   v1.Time{Time: epoch},
			CreatedBy: "hack/images: " + strings.Join(sortedKeys(im.Binaries), " "),
			Comment:   "static Go binaries",
		},
	})
	if err != nil {
		return nil, err
	}
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.Created = v1.Time{Time: epoch}
	cf.OS, cf.Architecture = "linux", arch
	cf.Config = v1.Config{
		Entrypoint: im.Entrypoint,
		User:       fmt.Sprintf("%d:%d", NonRoot, NonRoot),
		WorkingDir: "/",
		Labels: map[string]string{
			"org.opencontainers.image.title":  im.Name,
			"org.opencontainers.image.source": "https://github.com/ringmaster-io/ringmaster",
		},
	}
	return mutate.ConfigFile(img, cf)
}

// artifact is an OCI artifact manifest and its blobs, not yet written.
type artifact struct {
	desc     v1.Descriptor // of the manifest, with its artifactType
	manifest []byte
	blobs    [][]byte // the config's and the layers'
}

func (a artifact) writeTo(p layout.Path) error {
	for _, b := range append(slices.Clone(a.blobs), a.manifest) {
		if err := p.WriteBlob(sha256Hash(b), io.NopCloser(bytes.NewReader(b))); err != nil {
			return err
		}
	}
	return p.AppendDescriptor(a.desc)
}

// sbomArtifact runs cyclonedx-gomod on each binary of the image and
// returns the SBOM referrer of img: one layer per binary.
func sbomArtifact(ctx context.Context, opts Options, im Image, bins map[string]string, img v1.Image) (artifact, error) {
	subject, err := partialDescriptor(img)
	if err != nil {
		return artifact{}, err
	}
	config := []byte("{}")
	m := v1.Manifest{
		SchemaVersion: 2,
		MediaType:     types.OCIManifestSchema1,
		ArtifactType:  SBOMType,
		Config:        v1.Descriptor{MediaType: emptyType, Digest: sha256Hash(config), Size: int64(len(config)), Data: config},
		Subject:       &subject,
		Annotations:   map[string]string{"org.opencontainers.image.created": opts.Epoch.Format(time.RFC3339)},
	}
	a := artifact{blobs: [][]byte{config}}
	for _, path := range sortedKeys(im.Binaries) {
		sbom, err := cyclonedx(ctx, opts, bins[im.Binaries[path]])
		if err != nil {
			return artifact{}, err
		}
		a.blobs = append(a.blobs, sbom)
		m.Layers = append(m.Layers, v1.Descriptor{
			MediaType: SBOMType, Digest: sha256Hash(sbom), Size: int64(len(sbom)),
			Annotations: map[string]string{titleAnnotation: filepath.Base(path) + ".cdx.json"},
		})
	}
	if a.manifest, err = json.Marshal(m); err != nil {
		return artifact{}, err
	}
	a.desc = v1.Descriptor{MediaType: types.OCIManifestSchema1, ArtifactType: SBOMType, Digest: sha256Hash(a.manifest), Size: int64(len(a.manifest))}
	return a, nil
}

// cyclonedx is cyclonedx-gomod's SBOM of a binary, from its build
// information, without serial number or timestamp. It runs in the
// binary's directory on the binary's base name, so that no temporary path
// reaches the SBOM.
func cyclonedx(ctx context.Context, opts Options, bin string) ([]byte, error) {
	args := []string{"bin", "-json", "-noserial", "-notimestamp"}
	if opts.Version != "" {
		args = append(args, "-version", opts.Version)
	}
	args = append(args, "./"+filepath.Base(bin))
	cmd := exec.CommandContext(ctx, opts.SBOMTool, args...)
	cmd.Dir = filepath.Dir(bin)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w\n%s", opts.SBOMTool, strings.Join(args, " "), err, stderr.String())
	}
	return out, nil
}

// partialDescriptor is img's descriptor as a subject: media type, digest,
// size.
func partialDescriptor(img v1.Image) (v1.Descriptor, error) {
	mt, err := img.MediaType()
	if err != nil {
		return v1.Descriptor{}, err
	}
	d, err := img.Digest()
	if err != nil {
		return v1.Descriptor{}, err
	}
	n, err := img.Size()
	if err != nil {
		return v1.Descriptor{}, err
	}
	return v1.Descriptor{MediaType: mt, Digest: d, Size: n}, nil
}

func sha256Hash(b []byte) v1.Hash {
	sum := sha256.Sum256(b)
	return v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(sum[:])}
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

package main

import (
	"archive/tar"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// registryMain runs push or export.
func registryMain(cmd string, args []string) error {
	fs := flag.NewFlagSet("images "+cmd, flag.ContinueOnError)
	registry := fs.String("registry", "", "the registry, HOST[:PORT] (loopback and private addresses are spoken to over plain HTTP)")
	out := fs.String("out", "", "export: the directory for the tar files")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: images push -registry HOST[:PORT] NAME.tar...\n       images export -registry HOST[:PORT] -out DIR NAME.tar...\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *registry == "" || fs.NArg() == 0 {
		fs.Usage()
		return errors.New("-registry and at least one tar file are required")
	}
	ctx := context.Background()
	for _, tar := range fs.Args() {
		var (
			pushed Pushed
			err    error
		)
		switch cmd {
		case "push":
			pushed, err = Push(ctx, tar, *registry)
		case "export":
			if *out == "" {
				return errors.New("export needs -out")
			}
			pushed, err = Export(ctx, tar, *registry, filepath.Join(*out, filepath.Base(tar)))
		}
		if err != nil {
			return fmt.Errorf("%s: %w", tar, err)
		}
		fmt.Printf("%s %s %d referrers\n", pushed.Ref, pushed.Digest, pushed.Referrers)
	}
	return nil
}

// Pushed is an image index in a registry.
type Pushed struct {
	Ref       name.Tag
	Digest    v1.Hash
	Referrers int // pushed or exported with it
}

// Retarget is the image named ref in registry: its repository path under
// the registry's host.
func Retarget(ref, registry string) (name.Tag, error) {
	t, err := name.NewTag(ref)
	if err != nil {
		return name.Tag{}, err
	}
	return name.NewTag(registry + "/" + t.RepositoryStr() + ":" + t.TagStr())
}

// Layout is an image tar of make images, unpacked.
type Layout struct {
	// Named is the descriptor of the image index the layout names.
	Named v1.Descriptor
	// Index is that image index.
	Index v1.ImageIndex
	// Referrers are the other manifests the layout lists: SBOMs and
	// signatures, each with a subject in the index.
	Referrers []v1.Descriptor
	root      v1.ImageIndex
	dir       string
}

// ReadLayout unpacks an image tar of make images into a temporary
// directory, which Close removes.
func ReadLayout(tarFile string) (l *Layout, err error) {
	dir, err := os.MkdirTemp("", "ringmaster-layout-")
	if err != nil {
		return nil, err
	}
	l = &Layout{dir: dir}
	defer func() {
		if err != nil {
			l.Close()
		}
	}()
	if err = untar(tarFile, dir); err != nil {
		return nil, err
	}
	if l.root, err = layout.ImageIndexFromPath(dir); err != nil {
		return nil, err
	}
	im, err := l.root.IndexManifest()
	if err != nil {
		return nil, err
	}
	found := false
	for _, d := range im.Manifests {
		switch {
		case d.Annotations[nameAnnotation] != "":
			if found {
				return nil, errors.New("the layout names two images")
			}
			if !d.MediaType.IsIndex() {
				return nil, fmt.Errorf("%s is a %s, not an image index: rebuild it with make images", d.Annotations[nameAnnotation], d.MediaType)
			}
			l.Named, found = d, true
		case d.MediaType == types.OCIManifestSchema1:
			l.Referrers = append(l.Referrers, d)
		}
	}
	if !found {
		return nil, fmt.Errorf("no image named by %s in the layout", nameAnnotation)
	}
	if l.Index, err = l.root.ImageIndex(l.Named.Digest); err != nil {
		return nil, err
	}
	return l, nil
}

// Image is a manifest the layout lists, e.g. a referrer, as an image.
func (l *Layout) Image(d v1.Hash) (v1.Image, error) { return l.root.Image(d) }

// Close removes the unpacked layout.
func (l *Layout) Close() { os.RemoveAll(l.dir) }

// Push copies the tar's image index, its platforms' images and the
// referrers beside it to registry. ggcr keeps the referrers tag schema
// (sha256-DIGEST) for registries without the referrers API, such as the
// CNCF distribution registry.
func Push(ctx context.Context, tarFile, registry string) (Pushed, error) {
	l, err := ReadLayout(tarFile)
	if err != nil {
		return Pushed{}, err
	}
	defer l.Close()
	ref, err := Retarget(l.Named.Annotations[nameAnnotation], registry)
	if err != nil {
		return Pushed{}, err
	}
	opts := []remote.Option{remote.WithContext(ctx)}
	if err := remote.WriteIndex(ref, l.Index, opts...); err != nil {
		return Pushed{}, err
	}
	p := Pushed{Ref: ref, Digest: l.Named.Digest}
	for _, d := range l.Referrers {
		img, err := l.Image(d.Digest)
		if err != nil {
			return p, err
		}
		if err := remote.Write(ref.Context().Digest(d.Digest.String()), img, opts...); err != nil {
			return p, fmt.Errorf("referrer %s: %w", d.Digest, err)
		}
		p.Referrers++
	}
	return p, nil
}

// Export writes what registry holds of the tar's image into dst, a tar of
// the same shape: the index under the tar's name, and every referrer of
// the index and of each platform's image (SBOMs, signatures).
func Export(ctx context.Context, tarFile, registry, dst string) (Pushed, error) {
	l, err := ReadLayout(tarFile)
	if err != nil {
		return Pushed{}, err
	}
	l.Close()
	named := l.Named
	epoch, err := sourceDateEpoch()
	if err != nil {
		return Pushed{}, err
	}
	ref, err := Retarget(named.Annotations[nameAnnotation], registry)
	if err != nil {
		return Pushed{}, err
	}
	opts := []remote.Option{remote.WithContext(ctx)}
	idx, err := remote.Index(ref, opts...)
	if err != nil {
		return Pushed{}, err
	}
	d, err := idx.Digest()
	if err != nil {
		return Pushed{}, err
	}
	if d != named.Digest {
		return Pushed{}, fmt.Errorf("%s is %s in the registry, but %s in the tar file", ref, d, named.Digest)
	}
	dir, err := os.MkdirTemp("", "ringmaster-export-")
	if err != nil {
		return Pushed{}, err
	}
	defer os.RemoveAll(dir)
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return Pushed{}, err
	}
	if err := p.AppendIndex(idx, layout.WithAnnotations(named.Annotations)); err != nil {
		return Pushed{}, err
	}
	subjects := []v1.Hash{d}
	im, err := idx.IndexManifest()
	if err != nil {
		return Pushed{}, err
	}
	for _, m := range im.Manifests {
		subjects = append(subjects, m.Digest)
	}
	out := Pushed{Ref: ref, Digest: d}
	for _, s := range subjects {
		rr, err := remote.Referrers(ref.Context().Digest(s.String()), opts...)
		if err != nil {
			return out, fmt.Errorf("referrers of %s: %w", s, err)
		}
		rm, err := rr.IndexManifest()
		if err != nil {
			return out, err
		}
		for _, r := range rm.Manifests {
			img, err := remote.Image(ref.Context().Digest(r.Digest.String()), opts...)
			if err != nil {
				return out, fmt.Errorf("referrer %s of %s: %w", r.Digest, s, err)
			}
			if err := p.WriteImage(img); err != nil {
				return out, err
			}
			if err := p.AppendDescriptor(v1.Descriptor{MediaType: r.MediaType, Digest: r.Digest, Size: r.Size, ArtifactType: r.ArtifactType, Annotations: r.Annotations}); err != nil {
				return out, err
			}
			out.Referrers++
		}
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return out, err
	}
	return out, tarDir(dir, dst, epoch)
}

// untar unpacks a tar file of regular files and directories (an OCI
// layout) into dir, refusing names that would leave it.
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
		if !filepath.IsLocal(h.Name) {
			return fmt.Errorf("%s: %q is outside the layout", src, h.Name)
		}
		path := filepath.Join(dir, h.Name)
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(path, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				return err
			}
			data, err := io.ReadAll(tr)
			if err != nil {
				return err
			}
			if err := os.WriteFile(path, data, 0o644); err != nil {
				return err
			}
		default:
			return fmt.Errorf("%s: %s is neither a file nor a directory", src, h.Name)
		}
	}
}

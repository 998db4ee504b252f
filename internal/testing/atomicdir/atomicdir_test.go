package atomicdir

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

var tsDirName = regexp.MustCompile(`^\.\.\d{4}_\d{2}_\d{2}_\d{2}_\d{2}_\d{2}\.\d+$`)

// layout is what a reader of the directory observes after a write.
type layout struct {
	files map[string]string // visible path -> content, read through links
	links map[string]string // top-level visible link -> target
}

func TestWrite(t *testing.T) {
	type step struct {
		payload map[string]string
		want    layout
		// swapped says whether ..data must point somewhere new afterwards.
		swapped bool
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{
			name: "first write creates data dir and links",
			steps: []step{{
				payload: map[string]string{"ticketkeys.json": "r1", "tls.crt": "c1"},
				want: layout{
					files: map[string]string{"ticketkeys.json": "r1", "tls.crt": "c1"},
					links: map[string]string{"ticketkeys.json": "..data/ticketkeys.json", "tls.crt": "..data/tls.crt"},
				},
				swapped: true,
			}},
		},
		{
			name: "changed content swaps data dir and keeps links",
			steps: []step{
				{payload: map[string]string{"a": "1"}, swapped: true,
					want: layout{files: map[string]string{"a": "1"}, links: map[string]string{"a": "..data/a"}}},
				{payload: map[string]string{"a": "2"}, swapped: true,
					want: layout{files: map[string]string{"a": "2"}, links: map[string]string{"a": "..data/a"}}},
			},
		},
		{
			name: "identical payload is not rewritten",
			steps: []step{
				{payload: map[string]string{"a": "1"}, swapped: true,
					want: layout{files: map[string]string{"a": "1"}, links: map[string]string{"a": "..data/a"}}},
				{payload: map[string]string{"a": "1"}, swapped: false,
					want: layout{files: map[string]string{"a": "1"}, links: map[string]string{"a": "..data/a"}}},
			},
		},
		{
			name: "file leaving the payload loses its link",
			steps: []step{
				{payload: map[string]string{"a": "1", "b": "2"}, swapped: true,
					want: layout{files: map[string]string{"a": "1", "b": "2"}, links: map[string]string{"a": "..data/a", "b": "..data/b"}}},
				{payload: map[string]string{"a": "1"}, swapped: true,
					want: layout{files: map[string]string{"a": "1"}, links: map[string]string{"a": "..data/a"}}},
			},
		},
		{
			name: "nested path links its first element",
			steps: []step{{
				payload: map[string]string{"sub/x": "1", "y": "2"}, swapped: true,
				want: layout{files: map[string]string{"sub/x": "1", "y": "2"}, links: map[string]string{"sub": "..data/sub", "y": "..data/y"}},
			}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			w, err := NewWriter(dir)
			if err != nil {
				t.Fatal(err)
			}
			prev := ""
			for i, s := range tt.steps {
				payload := map[string]File{}
				for k, v := range s.payload {
					payload[k] = File{Data: []byte(v)}
				}
				if err := w.Write(payload); err != nil {
					t.Fatalf("step %d: Write: %v", i, err)
				}
				target, err := os.Readlink(filepath.Join(dir, DataDirName))
				if err != nil {
					t.Fatalf("step %d: ..data: %v", i, err)
				}
				if !tsDirName.MatchString(target) {
					t.Errorf("step %d: ..data -> %q, want a timestamped directory", i, target)
				}
				if got := target != prev; got != s.swapped {
					t.Errorf("step %d: ..data moved = %v, want %v", i, got, s.swapped)
				}
				prev = target
				checkLayout(t, dir, target, s.want)
			}
		})
	}
}

func checkLayout(t *testing.T, dir, target string, want layout) {
	t.Helper()
	for p, content := range want.files {
		got, err := os.ReadFile(filepath.Join(dir, p))
		if err != nil || string(got) != content {
			t.Errorf("read %s = %q, %v; want %q", p, got, err, content)
		}
		fi, err := os.Stat(filepath.Join(dir, target, p))
		if err != nil || fi.Mode().Perm() != 0o644 {
			t.Errorf("mode of %s = %v, %v; want 0644", p, fi.Mode().Perm(), err)
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	// Exactly: the visible links, ..data, and the one timestamped directory.
	wantNames := []string{DataDirName, target}
	for l, to := range want.links {
		wantNames = append(wantNames, l)
		got, err := os.Readlink(filepath.Join(dir, l))
		if err != nil || got != to {
			t.Errorf("link %s -> %q, %v; want %q", l, got, err, to)
		}
	}
	slices.Sort(names)
	slices.Sort(wantNames)
	if !slices.Equal(names, wantNames) {
		t.Errorf("directory holds %q, want %q", names, wantNames)
	}
}

func TestWriteRefusesInvalidPaths(t *testing.T) {
	for _, p := range []string{
		"",
		"/etc/passwd",
		"../escape",
		"a/../../b",
		"..data",
		"..hidden/file",
		strings.Repeat("x", maxFileNameLength+1),
		strings.Repeat("x/", maxPathLength/2+1),
	} {
		t.Run(p, func(t *testing.T) {
			dir := t.TempDir()
			w, err := NewWriter(dir)
			if err != nil {
				t.Fatal(err)
			}
			if err := w.Write(map[string]File{p: {Data: []byte("x")}}); err == nil {
				t.Fatalf("Write(%q) succeeded, want an error", p)
			}
			entries, _ := os.ReadDir(dir)
			if len(entries) != 0 {
				t.Errorf("refused write left %d entries behind", len(entries))
			}
		})
	}
}

func TestWriteKeepsMode(t *testing.T) {
	dir := t.TempDir()
	w, err := NewWriter(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Write(map[string]File{"tls.key": {Data: []byte("k"), Mode: 0o600}}); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(dir, "tls.key"))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode = %v, %v; want 0600", fi.Mode().Perm(), err)
	}
}

func TestNewWriterNeedsDirectory(t *testing.T) {
	if _, err := NewWriter(filepath.Join(t.TempDir(), "absent")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("NewWriter(absent) = %v, want a not-exist error", err)
	}
}

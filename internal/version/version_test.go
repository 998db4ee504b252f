package version

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
)

// semver is what an image tag and a chart's appVersion take: v, then
// SemVer 2.0.
var semver = regexp.MustCompile(`^v(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$`)

func TestVersionIsTheFilesAndSemVer(t *testing.T) {
	got := Version()
	if !semver.MatchString(got) {
		t.Fatalf("Version() = %q, want v and a SemVer version (VERSION holds %q)", got, file)
	}
	if got != strings.TrimSpace(file) {
		t.Errorf("Version() = %q without -X, want VERSION's %q", got, strings.TrimSpace(file))
	}
	if s := String("ringmaster"); s != "ringmaster "+got+" ("+runtime.Version()+")" {
		t.Errorf("String = %q", s)
	}
}

// TestLdflagsSetsIt runs a program printing Version() built with -X, as
// hack/images builds the binaries, and without.
func TestLdflagsSetsIt(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a program")
	}
	for _, tt := range []struct{ ldflags, want string }{
		{"", Version()},
		{"-X github.com/ringmaster-io/ringmaster/internal/version.version=v9.8.7-rc.1", "v9.8.7-rc.1"},
	} {
		out, err := exec.Command("go", "run", "-ldflags="+tt.ldflags, "./testdata/printversion").Output()
		if err != nil {
			t.Fatalf("go run -ldflags=%q: %v", tt.ldflags, err)
		}
		if string(out) != tt.want {
			t.Errorf("-ldflags=%q: printed %q, want %q", tt.ldflags, out, tt.want)
		}
	}
}

// TestOneVersionEverywhere keeps what must name the version as text in
// step with VERSION: the chart's version and appVersion (the images' tag
// the chart defaults to), and the ringmaster images config/samples pin.
func TestOneVersionEverywhere(t *testing.T) {
	v := Version()
	chart, err := os.ReadFile("../../charts/ringmaster/Chart.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"\nversion: " + strings.TrimPrefix(v, "v") + "\n", "\nappVersion: \"" + v + "\"\n"} {
		if !strings.Contains(string(chart), want) {
			t.Errorf("charts/ringmaster/Chart.yaml lacks %q: VERSION holds %s", strings.TrimSpace(want), v)
		}
	}
	samples, err := filepath.Glob("../../config/samples/*.yaml")
	if err != nil || len(samples) == 0 {
		t.Fatalf("no samples (%v)", err)
	}
	image := regexp.MustCompile(`image: (ghcr\.io/ringmaster-io/[a-z-]+)(\S*)`)
	n := 0
	for _, f := range samples {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range image.FindAllStringSubmatch(string(b), -1) {
			n++
			if m[2] != ":"+v {
				t.Errorf("%s pins %s%s, want %s:%s (VERSION)", filepath.Base(f), m[1], m[2], m[1], v)
			}
		}
	}
	if n == 0 {
		t.Error("config/samples pin no ringmaster image")
	}
}

package fleet

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Binaries are the programs the harness runs, built from this module.
type Binaries struct {
	// Operator is the ringmaster operator (main.go at the module root).
	Operator string
	// Server is examples/server, one process per replica.
	Server string
	// ControlPlane is hack/controlplane: etcd and kube-apiserver.
	ControlPlane string
	// Sidecar is cmd/ringmaster-agent, beside each nginx or HAProxy.
	Sidecar string
}

// ModuleRoot returns the directory of this module's go.mod, found by the go
// command from the working directory.
func ModuleRoot(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == "/dev/null" {
		return "", fmt.Errorf("not inside the ringmaster module (go env GOMOD is %q)", gomod)
	}
	return filepath.Dir(gomod), nil
}

// Build compiles the operator, examples/server, hack/controlplane and
// cmd/ringmaster-agent into dir with one go build, which links them in
// parallel. Shipped builds them as make images builds the images' binaries
// (hack/images): static, without cgo, trimmed paths, stripped; the first
// such build compiles every package again, as the flags differ.
func Build(ctx context.Context, dir string, shipped bool) (Binaries, error) {
	root, err := ModuleRoot(ctx)
	if err != nil {
		return Binaries{}, err
	}
	args := []string{"build", "-o", dir + string(filepath.Separator)}
	if shipped {
		args = append(args, "-trimpath", "-buildvcs=false", "-ldflags=-s -w -buildid=")
	}
	cmd := exec.CommandContext(ctx, "go", append(args, ".", "./examples/server", "./hack/controlplane", "./cmd/ringmaster-agent")...)
	cmd.Dir = root
	if shipped {
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return Binaries{}, fmt.Errorf("go build: %w\n%s", err, out.String())
	}
	return Binaries{
		Operator:     filepath.Join(dir, "ringmaster"),
		Server:       filepath.Join(dir, "server"),
		ControlPlane: filepath.Join(dir, "controlplane"),
		Sidecar:      filepath.Join(dir, "ringmaster-agent"),
	}, nil
}

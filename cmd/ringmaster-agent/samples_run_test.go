//go:build integration

package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/ringmaster-io/ringmaster/internal/keyring"
	"github.com/ringmaster-io/ringmaster/internal/testing/atomicdir"
	"github.com/ringmaster-io/ringmaster/internal/testing/fleet"
)

// TestSampleDeployments runs the example Deployments of config/samples as
// shipped, with the real nginx and HAProxy and the sidecar's binary. Each
// volume is laid out as the kubelet lays it out: a Secret volume holds its
// items only, with defaultMode, group fsGroup; an emptyDir is group
// fsGroup, group-writable, with the setgid bit. The server's configuration
// and command and the sidecar's arguments run on those directories, moved
// onto loopback, each process (when the test runs as root) as its
// container's user, group and fsGroup. Then: the server encrypts with the
// active key and resumes sessions, and no file of the server's volumes is
// ticketkeys.json or holds a byte of the ring's secrets; nginx, which
// shares its process namespace with the sidecar, cannot open the ring
// through the sidecar's /proc entries.
func TestSampleDeployments(t *testing.T) {
	root := os.Geteuid() == 0
	if !root {
		t.Log("Not root: the processes run as the test's user, not the samples' users")
	}
	base := sharedTempDir(t)
	bin := filepath.Join(base, "ringmaster-agent")
	if out, err := exec.CommandContext(t.Context(), "go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	for _, tc := range samples {
		t.Run(string(tc.kind), func(t *testing.T) {
			cm, dep := readSample(t, tc.file)
			spec := dep.Spec.Template.Spec
			side, srv := spec.InitContainers[0], spec.Containers[0]
			g := newRig(t, tc.kind)
			ring, active, staged := sampleRing(1, time.Now())
			pki := g.pki.Files()
			secrets := sampleSecrets(t, ring, map[string][]byte{"tls.crt": pki["tls.crt"].Data, "tls.key": pki["tls.key"].Data, "ca.crt": pki["tls.crt"].Data})
			var fsGroup int64 = -1
			if root && spec.SecurityContext.FSGroup != nil {
				fsGroup = *spec.SecurityContext.FSGroup
			}
			vols := layVolumes(t, filepath.Join(base, string(tc.kind)), spec, secrets, fsGroup)

			// The server's configuration, in its ConfigMap volume, on
			// the server's mounts and on loopback.
			srvMove := mover(srv, vols, map[string]string{tc.listen: strings.Fields(tc.listen)[0] + " " + g.r.Addr})
			confPath := srvMove.Replace(mountOf(t, srv, "config") + "/" + tc.configFile)
			if err := os.WriteFile(confPath, []byte(srvMove.Replace(cm.Data[tc.configFile])), 0o644); err != nil {
				t.Fatal(err)
			}
			g.r.Shared = srvMove.Replace(sampleShared)

			sideMove := mover(side, vols, nil)
			var args []string
			for _, a := range side.Args {
				a = strings.ReplaceAll(a, "$(POD_NAMESPACE)", "shop")
				switch {
				case strings.HasPrefix(a, "--listen="):
					a = "--listen=127.0.0.1:0"
				case strings.HasPrefix(a, "--probe-addr="):
					a = "--probe-addr=" + g.r.Addr
				}
				args = append(args, sideMove.Replace(a))
			}
			p, err := g.sup.Start("sidecar", "setpriv", asUser(root, spec, side, append([]string{bin}, append(args, "--interval=500ms")...)))
			if err != nil {
				t.Fatal(err)
			}
			g.log = p.Log
			wait, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			if g.sidecarAddr, err = p.WaitLine(wait, "listening on "); err != nil {
				t.Fatalf("the sidecar did not start: %v\n%s", err, p.LogTail(20))
			}

			cmd := serverCommand(tc.kind, srv)
			for i := range cmd {
				cmd[i] = srvMove.Replace(cmd[i])
			}
			if g.r.Proc, err = g.sup.Start("server", "setpriv", asUser(root, spec, srv, cmd)); err != nil {
				t.Fatal(err)
			}
			waitListening(t, g.r.Addr, g.r.Proc)

			g.waitTaken(1, active)
			if !g.encryptsWith(active) {
				t.Errorf("%s, as the sample configures it, does not encrypt with the active key", tc.kind)
			}
			g.checkResumes()

			for _, m := range srv.VolumeMounts {
				checkHoldsNoRing(t, srv.Name, vols[m.Name], active, staged)
			}
			if tc.kind == fleet.Nginx && root {
				// One user, so that the sidecar may signal nginx; not one
				// group, so that the kernel keeps nginx out of the
				// sidecar's /proc/<pid>/root (its mounts) all the same.
				ringFile := sideMove.Replace(sampleVolume + "/" + keyring.FileName)
				through := fmt.Sprintf("/proc/%d/root%s", p.PID, ringFile)
				if out, err := exec.Command("setpriv", asUser(root, spec, srv, []string{"cat", through})...).CombinedOutput(); err == nil {
					t.Errorf("nginx's user and group read the ring through the sidecar's %s", through)
				} else if !bytes.Contains(out, []byte("Permission denied")) {
					t.Errorf("reading %s as nginx: %v: %s, want permission denied", through, err, out)
				}
				if out, err := exec.Command("setpriv", asUser(root, spec, side, []string{"cat", through})...).CombinedOutput(); err != nil {
					t.Errorf("the control failed: the sidecar's own user cannot read %s: %v: %s", through, err, out)
				}
			}
			g.assertNoSecrets(active, staged)
		})
	}
}

// sharedTempDir is a temporary directory every user may enter, as the
// samples' users must to reach their volumes.
func sharedTempDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "ringmaster-samples-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// layVolumes lays out each volume of spec under dir, as the kubelet does,
// and returns their directories by name. fsGroup -1 sets no ownership.
func layVolumes(t *testing.T, dir string, spec corev1.PodSpec, secrets map[string]map[string][]byte, fsGroup int64) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, v := range spec.Volumes {
		d := filepath.Join(dir, v.Name)
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		out[v.Name] = d
		switch {
		case v.Secret != nil:
			w, err := atomicdir.NewWriter(d)
			if err != nil {
				t.Fatal(err)
			}
			files := map[string]atomicdir.File{}
			for p, f := range secretFiles(t, v, secrets) {
				files[p] = atomicdir.File{Data: f.data, Mode: fs.FileMode(f.mode)}
			}
			if err := w.Write(files); err != nil {
				t.Fatal(err)
			}
			chownTree(t, d, fsGroup)
		case v.EmptyDir != nil:
			// The kubelet's emptyDir is 0777; fsGroup adds its group and
			// the setgid bit, so that what is created in it is the group's.
			if err := os.Chmod(d, 0o777|fs.ModeSetgid); err != nil {
				t.Fatal(err)
			}
			chownTree(t, d, fsGroup)
		}
	}
	return out
}

func chownTree(t *testing.T, dir string, gid int64) {
	t.Helper()
	if gid < 0 {
		return
	}
	err := filepath.WalkDir(dir, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, 0, int(gid))
	})
	if err != nil {
		t.Fatal(err)
	}
}

// mover rewrites c's mount paths into the volumes' directories, and the
// extra replacements; longer paths first, so that /var/run/ringmaster does
// not take the start of /var/run/ringmaster-server.
func mover(c corev1.Container, vols map[string]string, extra map[string]string) *strings.Replacer {
	var olds []string
	news := map[string]string{}
	for _, m := range c.VolumeMounts {
		olds = append(olds, m.MountPath)
		news[m.MountPath] = vols[m.Name]
	}
	for k, v := range extra {
		olds = append(olds, k)
		news[k] = v
	}
	sort.Slice(olds, func(i, j int) bool { return len(olds[i]) > len(olds[j]) })
	var pairs []string
	for _, o := range olds {
		pairs = append(pairs, o, news[o])
	}
	return strings.NewReplacer(pairs...)
}

func mountOf(t *testing.T, c corev1.Container, volume string) string {
	t.Helper()
	for _, m := range c.VolumeMounts {
		if m.Name == volume {
			return m.MountPath
		}
	}
	t.Fatalf("container %s does not mount %s", c.Name, volume)
	return ""
}

// serverCommand is what the server's container runs: its command (nginx's
// sample sets one) or the haproxy image's entrypoint with its args, the
// binary being Debian's.
func serverCommand(kind fleet.ServerKind, c corev1.Container) []string {
	switch kind {
	case fleet.Nginx:
		return append([]string{"/usr/sbin/nginx"}, c.Command[1:]...)
	default:
		// The image's entrypoint runs haproxy -W -db with the args.
		return append([]string{"/usr/sbin/haproxy", "-W", "-db"}, c.Args...)
	}
}

// asUser is setpriv's arguments to run cmd as c's user and group with the
// pod's fsGroup, without privileges, as the container runs; only the
// no-new-privileges flag when not root.
func asUser(root bool, spec corev1.PodSpec, c corev1.Container, cmd []string) []string {
	args := []string{"--no-new-privs"}
	if root {
		uid, gid := userOf(spec, c)
		args = append(args, "--reuid="+strconv.FormatInt(*uid, 10), "--regid="+strconv.FormatInt(*gid, 10))
		if fsg := spec.SecurityContext.FSGroup; fsg != nil {
			args = append(args, "--groups="+strconv.FormatInt(*fsg, 10))
		} else {
			args = append(args, "--clear-groups")
		}
	}
	return append(append(args, "--"), cmd...)
}

// waitListening waits until addr accepts connections, failing early if p
// exits.
func waitListening(t *testing.T, addr string, p *fleet.Proc) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return
		}
		if exited, perr := p.Exited(); exited {
			t.Fatalf("%s exited (%v) before listening on %s:\n%s", p.Name, perr, addr, p.LogTail(20))
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s does not listen on %s:\n%s", p.Name, addr, p.LogTail(20))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// checkHoldsNoRing fails if a file under dir, a volume container c
// mounts, is ticketkeys.json or holds any of keys' secrets (raw, hex or
// base64, as ticketkeys.json has them); derived keys are the server's own.
func checkHoldsNoRing(t *testing.T, c, dir string, keys ...keyring.Key) {
	t.Helper()
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		if d.Name() == keyring.FileName {
			t.Errorf("container %s sees %s", c, p)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		for _, k := range keys {
			for _, form := range []string{string(k.Secret[:16]), hex.EncodeToString(k.Secret[:16]), base64.StdEncoding.EncodeToString(k.Secret[:])[:20]} {
				if bytes.Contains(b, []byte(form)) {
					t.Errorf("container %s's %s holds the ring's secret of key %s", c, p, k.ID)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

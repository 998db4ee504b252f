package fleet

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/ringmaster-io/ringmaster/internal/testing/atomicdir"
)

// ServerKind is the TLS server a fleet's replicas run.
type ServerKind string

// The servers a fleet can run.
const (
	// GoServer is examples/server, which embeds pkg/agent.
	GoServer ServerKind = ""
	// Nginx and HAProxy come from Debian's packages (hack/debian.sh), each
	// replica with a ringmaster-agent sidecar when the fleet has a ring.
	Nginx   ServerKind = "nginx"
	HAProxy ServerKind = "haproxy"
)

// Paths of the Debian packages' binaries.
const (
	nginxBin   = "/usr/sbin/nginx"
	haproxyBin = "/usr/sbin/haproxy"
)

// sidecarInterval is the sidecars' --interval: how soon one notices a
// restarted server, and the longest it waits between two attempts.
const sidecarInterval = time.Second

// CheckServer returns an error naming the make target that installs kind's
// binary when it is missing.
func CheckServer(kind ServerKind) error {
	bin := map[ServerKind]string{Nginx: nginxBin, HAProxy: haproxyBin}[kind]
	if bin == "" {
		return nil
	}
	if _, err := os.Stat(bin); err != nil {
		return fmt.Errorf("%s is missing: make test installs it (hack/debian.sh nginx haproxy): %w", bin, err)
	}
	return nil
}

// serverFiles is what a replica of kind finds in its volume beside the
// ring: the certificate, as a projected volume adds it from a
// kubernetes.io/tls Secret. HAProxy reads the key of its crt tls.crt from
// tls.crt.key, which the sample projects with an items entry.
func (e *Env) serverFiles(kind ServerKind) map[string]atomicdir.File {
	files := e.PKI.Files()
	if kind == HAProxy {
		files["tls.crt.key"] = files["tls.key"]
	}
	return files
}

// startServerReplica starts r's sidecar (with a ring) and then its server:
// the sidecar writes the server's files first, as a native sidecar (an
// init container that keeps running) does in the sample Deployments.
func (f *Fleet) startServerReplica(ctx context.Context, r *Replica) error {
	r.Shared = r.Dir + "-shared"
	r.Conf = r.Dir + "-conf"
	for _, d := range []string{r.Shared, r.Conf} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return err
		}
	}
	port, err := FreePort()
	if err != nil {
		return err
	}
	r.Addr = port
	if err := WriteServerConfig(f.Server, r, f.keyed); err != nil {
		return err
	}
	if f.keyed {
		if err := f.StartSidecar(ctx, r); err != nil {
			return err
		}
		first := map[ServerKind]string{Nginx: "nginx-ticket-keys.conf", HAProxy: "haproxy.keys"}[f.Server]
		if err := WaitFile(ctx, filepath.Join(r.Shared, first), r.Sidecar); err != nil {
			return err
		}
	}
	return f.StartServer(ctx, r)
}

// WriteServerConfig writes the configuration of r's nginx or HAProxy into
// r.Conf: TLS on r.Addr with the certificate of r.Dir (its volume), ticket
// keys from r.Shared when keyed (the server's own otherwise), and a
// greeting that names the address answering. The sidecar's files are where
// the sample Deployments put them.
func WriteServerConfig(kind ServerKind, r *Replica, keyed bool) error {
	var conf string
	switch kind {
	case Nginx:
		include := ""
		if keyed {
			include = fmt.Sprintf("include %s/*.conf;", r.Shared)
		}
		conf = fmt.Sprintf(`master_process on;
worker_processes 1;
pid %[1]s/nginx.pid;
error_log %[2]s/error.log notice;
events { worker_connections 1024; }
http {
    access_log off;
    server {
        listen %[3]s ssl;
        ssl_certificate %[4]s/tls.crt;
        ssl_certificate_key %[4]s/tls.key;
        ssl_protocols TLSv1.2 TLSv1.3;
        %[5]s
        location / { return 200 "hello from $server_addr:$server_port\n"; }
    }
}
`, r.Shared, r.Conf, r.Addr, r.Dir, include)
	case HAProxy:
		keys := ""
		if keyed {
			keys = fmt.Sprintf("tls-ticket-keys %s/haproxy.keys", r.Shared)
		}
		conf = fmt.Sprintf(`global
    stats socket %[1]s/haproxy.sock mode 600 level admin
defaults
    mode http
    timeout connect 5s
    timeout client 30s
    timeout server 30s
frontend tls
    bind %[2]s ssl crt %[3]s/tls.crt %[4]s alpn http/1.1
    http-request return status 200 content-type text/plain lf-string "hello from %%[dst]:%%[dst_port]\n"
`, r.Shared, r.Addr, r.Dir, keys)
	default:
		return fmt.Errorf("no configuration for server %q", kind)
	}
	return os.WriteFile(r.ConfFile(kind), []byte(conf), 0o600)
}

// ConfFile is where r's configuration of kind is written, in r.Conf.
func (r *Replica) ConfFile(kind ServerKind) string {
	return filepath.Join(r.Conf, string(kind)+".conf")
}

// StartServer starts r's nginx or HAProxy (again, after StopServer) and
// waits until it accepts connections.
func (f *Fleet) StartServer(ctx context.Context, r *Replica) error {
	return StartServer(ctx, f.sup, f.Server, fmt.Sprintf("%s-replica-%d", f.Name, r.Index), r)
}

// StartServer starts the nginx or HAProxy of r's configuration
// (WriteServerConfig) under sup, sets r.Proc, and waits until it accepts
// connections.
func StartServer(ctx context.Context, sup *Supervisor, kind ServerKind, name string, r *Replica) error {
	var bin string
	var args []string
	switch kind {
	case Nginx:
		// In the foreground, as in a container (the sample's command).
		bin, args = nginxBin, []string{"-g", "daemon off;", "-c", r.ConfFile(Nginx), "-p", r.Conf + "/", "-e", filepath.Join(r.Conf, "error.log")}
	case HAProxy:
		bin, args = haproxyBin, []string{"-db", "-f", r.ConfFile(HAProxy)}
	default:
		return fmt.Errorf("no server %q to start", kind)
	}
	p, err := sup.Start(name, bin, args)
	if err != nil {
		return err
	}
	r.Proc = p
	return waitListening(ctx, r.Addr, p)
}

// NginxCheckCommand is the --check-command of r's sidecar: nginx -t on r's
// configuration, as the sidecar runs it before each reload.
func NginxCheckCommand(r *Replica) string {
	return fmt.Sprintf("%s -t -q -c %s -p %s/ -e %s", nginxBin, r.ConfFile(Nginx), r.Conf, filepath.Join(r.Conf, "check.log"))
}

// StopServer stops r's server by its pid (nginx's workers with their
// master), as the kubelet stops a container.
func (f *Fleet) StopServer(r *Replica) error {
	if r.Proc == nil {
		return nil
	}
	err := r.Proc.Stop()
	r.Proc = nil
	return err
}

// StartSidecar starts r's ringmaster-agent (again, after KillSidecar) and
// waits until it serves its endpoints.
func (f *Fleet) StartSidecar(ctx context.Context, r *Replica) error {
	args := []string{
		"--server", string(f.Server), "--dir", r.Dir, "--ring", f.ring, "--out-dir", r.Shared,
		"--listen", "127.0.0.1:0", "--interval", sidecarInterval.String(),
		"--probe-addr", r.Addr, "--probe-server-name", ServerName,
	}
	if f.Server == Nginx {
		args = append(args, "--check-command", NginxCheckCommand(r))
	}
	p, err := f.sup.Start(fmt.Sprintf("%s-sidecar-%d", f.Name, r.Index), f.bins.Sidecar, args)
	if err != nil {
		return err
	}
	wait, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	addr, err := p.WaitLine(wait, "listening on ")
	if err != nil {
		_ = p.Stop()
		return err
	}
	if !isLoopback(addr) {
		_ = p.Stop()
		return fmt.Errorf("sidecar %d listens on %s, beyond loopback", r.Index, addr)
	}
	r.Sidecar, r.SidecarAddr = p, addr
	return nil
}

// KillSidecar ends r's sidecar with SIGKILL, by its pid: it gets no chance
// to tidy anything.
func (f *Fleet) KillSidecar(r *Replica) error {
	if r.Sidecar == nil {
		return nil
	}
	if err := r.Sidecar.Kill(); err != nil {
		return err
	}
	r.Sidecar = nil
	return nil
}

// Ready reads r's sidecar's /readyz: whether its server holds the keys
// the sidecar serves now, and the answer's first line.
func (f *Fleet) Ready(ctx context.Context, r *Replica) (bool, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+r.SidecarAddr+"/readyz", nil)
	if err != nil {
		return false, "", err
	}
	resp, err := f.health.Do(req)
	if err != nil {
		return false, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4096))
	line, _, _ := strings.Cut(string(body), "\n")
	return resp.StatusCode == http.StatusOK, line, err
}

// FreePort returns a loopback address with a port free at the time of the
// call, for a server that cannot report the port it bound.
func FreePort() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	addr := ln.Addr().String()
	return addr, ln.Close()
}

// waitListening waits until addr accepts connections, failing early if p
// exits.
func waitListening(ctx context.Context, addr string, p *Proc) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			return c.Close()
		}
		if exited, perr := p.Exited(); exited {
			return fmt.Errorf("%s exited (%w) before listening on %s; log %s:\n%s", p.Name, perr, addr, p.Log, p.LogTail(20))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s does not listen on %s: %w", p.Name, addr, ctx.Err())
		case <-time.After(pollEvery / 4):
		}
	}
}

// WaitFile waits until path exists, failing early if p (if set) exits.
func WaitFile(ctx context.Context, path string, p *Proc) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		if _, err := os.Stat(path); err == nil {
			return nil
		}
		if p != nil {
			if exited, perr := p.Exited(); exited {
				return fmt.Errorf("%s exited (%w) before writing %s; log %s:\n%s", p.Name, perr, path, p.Log, p.LogTail(20))
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s was not written: %w", path, ctx.Err())
		case <-time.After(pollEvery / 4):
		}
	}
}

package fleet

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ringmaster-io/ringmaster/internal/agentstatus"
	"github.com/ringmaster-io/ringmaster/internal/testing/atomicdir"
)

// Config describes a fleet of examples/server replicas.
type Config struct {
	// Name names the fleet's directories and logs.
	Name string
	// Delays holds each replica's delivery delay; there is one replica per
	// entry.
	Delays []time.Duration
	// Namespace and Secret name the projection Secret the replicas mount.
	// An empty Secret runs the replicas without ticket keys: crypto/tls then
	// keeps per-process keys of its own, the default every Go server has,
	// and nginx and HAProxy keep theirs.
	Namespace, Secret string
	// Ring, if set, is the ring the replicas' sidecars pin (--ring).
	Ring string
	// Server is what each replica runs: examples/server by default, or
	// nginx or HAProxy, each with a ringmaster-agent sidecar when Secret is
	// set.
	Server ServerKind
	// ClassicalResumption runs examples/server with -classical-resumption:
	// resumed TLS 1.3 handshakes use X25519 alone. Go servers only.
	ClassicalResumption bool
	// ECH says Secret is an ECHKeyRing's projection (echkeys.json): the
	// replicas serve ECH from it beside their certificate, and keep
	// crypto/tls's own ticket keys. Go servers only.
	ECH bool
}

// Replica is one server process and its volume: examples/server, or nginx
// or HAProxy and their sidecar.
type Replica struct {
	Index int
	// Dir is the replica's projected volume, which the stand-in kubelet
	// writes.
	Dir   string
	Delay time.Duration
	// Addr is its HTTPS address on loopback.
	Addr string
	// StatusAddr is examples/server's plain-HTTP address on loopback,
	// serving /healthz, /metrics and the agent's status (agent.StatusPath),
	// none of which its TLS port serves.
	StatusAddr string
	// Proc is the server: examples/server, nginx's master, HAProxy.
	Proc *Proc

	// Shared is the directory nginx or HAProxy shares with its sidecar
	// (the pod's emptyDir), Conf holds its configuration and logs.
	Shared, Conf string
	// Sidecar is the replica's ringmaster-agent, SidecarAddr where it
	// serves /healthz, /readyz and /metrics; nil and empty for
	// examples/server and for a fleet without ring.
	Sidecar     *Proc
	SidecarAddr string
}

// Fleet is replicas behind a round-robin balancer, fed by a projection
// syncer.
type Fleet struct {
	Name     string
	Server   ServerKind
	Replicas []*Replica
	Syncer   *Syncer // nil without ticket keys
	LB       *Balancer

	sup  *Supervisor
	bins Binaries
	// ring is the sidecars' --ring; keyed says whether the fleet has ticket
	// keys (a Secret) at all.
	ring  string
	keyed bool
	// secret is the projection Secret the replicas mount.
	secret string

	pki      *PKI
	health   *http.Client
	stop     context.CancelFunc
	wg       sync.WaitGroup
	stopOnce sync.Once
	stopErr  error
}

// StartFleet starts the syncer, waits until every replica's volume holds its
// first delivery, starts one examples/server per replica, and puts a
// balancer in front of them. Stop ends it; the supervisor also ends its
// processes.
func (e *Env) StartFleet(ctx context.Context, cfg Config) (*Fleet, error) {
	if len(cfg.Delays) == 0 {
		return nil, errors.New("fleet: no replicas")
	}
	if err := CheckServer(cfg.Server); err != nil {
		return nil, err
	}
	if cfg.ClassicalResumption && cfg.Server != GoServer {
		return nil, fmt.Errorf("fleet %s: ClassicalResumption is an option of pkg/agent, for Go servers only", cfg.Name)
	}
	f := &Fleet{Name: cfg.Name, Server: cfg.Server, sup: e.Sup, bins: e.Bins, ring: cfg.Ring, keyed: cfg.Secret != "", secret: cfg.Secret, pki: e.PKI, health: &http.Client{
		Timeout: 5 * time.Second,
		Transport: &http.Transport{
			TLSClientConfig:   &tls.Config{RootCAs: e.PKI.Roots, ServerName: ServerName},
			DisableKeepAlives: true,
		},
	}}
	syncCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	f.stop = stop
	e.mu.Lock()
	e.fleets = append(e.fleets, f)
	e.mu.Unlock()
	var targets []Target
	for i, d := range cfg.Delays {
		dir := filepath.Join(e.Work, cfg.Name, fmt.Sprintf("replica-%d", i))
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, errors.Join(err, f.Stop())
		}
		f.Replicas = append(f.Replicas, &Replica{Index: i, Dir: dir, Delay: d})
		targets = append(targets, Target{Dir: dir, Delay: d, Extra: e.serverFiles(cfg.Server)})
	}

	if cfg.ECH && (cfg.Server != GoServer || cfg.Secret == "") {
		return nil, errors.Join(fmt.Errorf("fleet %s: ECH needs a Go server and an ECHKeyRing's projection Secret", cfg.Name), f.Stop())
	}
	require := "keys,cert"
	if cfg.ECH {
		require = "cert" // echkeys.json is served whenever it is there
	}
	if cfg.Secret == "" {
		// No ring: the certificate alone, written once as the kubelet would.
		require = "cert"
		for _, r := range f.Replicas {
			w, err := atomicdir.NewWriter(r.Dir)
			if err == nil {
				err = w.Write(e.serverFiles(cfg.Server))
			}
			if err != nil {
				return nil, errors.Join(err, f.Stop())
			}
		}
	} else {
		s, err := NewSyncer(e.Cluster.Clientset, cfg.Namespace, cfg.Secret, targets)
		if err != nil {
			return nil, errors.Join(err, f.Stop())
		}
		f.Syncer = s
		f.wg.Go(func() { s.Run(syncCtx) })
		if err := f.waitFirstDelivery(ctx); err != nil {
			return nil, errors.Join(err, f.Stop())
		}
	}

	if cfg.Server != GoServer {
		for _, r := range f.Replicas {
			if err := f.startServerReplica(ctx, r); err != nil {
				return nil, errors.Join(err, f.Stop())
			}
		}
		if err := f.startBalancer(); err != nil {
			return nil, err
		}
		return f, nil
	}
	if err := e.startGoReplicas(ctx, f, cfg, require); err != nil {
		return nil, errors.Join(err, f.Stop())
	}
	if err := f.startBalancer(); err != nil {
		return nil, err
	}
	return f, nil
}

// startGoReplicas starts the fleet's Go servers (examples/server), reading
// require from their directories, and waits until each listens.
func (e *Env) startGoReplicas(ctx context.Context, f *Fleet, cfg Config, require string) error {
	for _, r := range f.Replicas {
		// -greeting-names-keys: each connection's greeting names the key
		// that encrypted, which the load attributes it to.
		args := []string{"-dir", r.Dir, "-listen", "127.0.0.1:0", "-status-listen", "127.0.0.1:0", "-greeting-names-keys", "-require", require}
		if cfg.ClassicalResumption {
			args = append(args, "-classical-resumption")
		}
		p, err := e.Sup.Start(fmt.Sprintf("%s-replica-%d", cfg.Name, r.Index), e.Bins.Server, args)
		if err != nil {
			return err
		}
		r.Proc = p
	}
	for _, r := range f.Replicas {
		wait, cancel := context.WithTimeout(ctx, 30*time.Second)
		addr, err := r.Proc.WaitLine(wait, "https listening on ")
		if err == nil {
			r.StatusAddr, err = r.Proc.WaitLine(wait, "status listening on ")
		}
		cancel()
		if err != nil {
			return err
		}
		if !isLoopback(addr) {
			return fmt.Errorf("replica %d listens on %s, beyond loopback", r.Index, addr)
		}
		r.Addr = addr
	}
	return nil
}

// startBalancer puts a balancer in front of the replicas; on failure it
// stops the fleet.
func (f *Fleet) startBalancer() error {
	backends := make([]string, len(f.Replicas))
	for i, r := range f.Replicas {
		backends[i] = r.Addr
	}
	lb, err := StartBalancer(backends)
	if err != nil {
		return errors.Join(err, f.Stop())
	}
	f.LB = lb
	return nil
}

func (f *Fleet) waitFirstDelivery(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for {
		missing := 0
		for i := range f.Replicas {
			if len(f.Syncer.Deliveries(i)) == 0 {
				missing++
			}
		}
		if errs := f.Syncer.Errors(); len(errs) > 0 {
			return errors.Join(errs...)
		}
		if missing == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("fleet %s: %d replica volume(s) never received the projection: %w", f.Name, missing, ctx.Err())
		case <-time.After(pollEvery):
		}
	}
}

// Stop stops the balancer, the replicas and the syncer, each replica by its
// own pid. It is safe to call on a fleet that failed to start, and more than
// once.
func (f *Fleet) Stop() error {
	f.stopOnce.Do(func() { f.stopErr = f.stopNow() })
	return f.stopErr
}

func (f *Fleet) stopNow() error {
	var errs []error
	if f.LB != nil {
		errs = append(errs, f.LB.Close())
	}
	for _, r := range f.Replicas {
		for _, p := range []*Proc{r.Proc, r.Sidecar} {
			if p != nil {
				errs = append(errs, p.Stop())
			}
		}
	}
	if f.stop != nil {
		f.stop()
	}
	f.wg.Wait()
	return errors.Join(errs...)
}

// Health reads every replica's /healthz: the agent's Status. For nginx and
// HAProxy it is their sidecar's, which describes the keys the server holds.
func (f *Fleet) Health(ctx context.Context) ([]agentstatus.Status, error) {
	out := make([]agentstatus.Status, len(f.Replicas))
	for i, r := range f.Replicas {
		url := "http://" + r.StatusAddr + "/healthz"
		if f.Server != GoServer {
			url = "http://" + r.SidecarAddr + "/healthz"
		}
		st, err := f.healthOf(ctx, url)
		if err != nil {
			return nil, fmt.Errorf("replica %d: %w", i, err)
		}
		out[i] = st
	}
	return out, nil
}

func (f *Fleet) healthOf(ctx context.Context, url string) (agentstatus.Status, error) {
	return ReadHealthURL(ctx, f.health, url)
}

// Metric reads one series from every replica's /metrics (examples/server's
// plain-HTTP listener), in replica order. series is the name with its
// labels as exposed, e.g. ringmaster_agent_handshakes_total{resumed="true"}.
func (f *Fleet) Metric(ctx context.Context, series string) ([]float64, error) {
	if f.Server != GoServer {
		return nil, fmt.Errorf("fleet %s: only examples/server replicas serve the agent's metrics here", f.Name)
	}
	out := make([]float64, len(f.Replicas))
	for i, r := range f.Replicas {
		v, err := f.metricOf(ctx, "http://"+r.StatusAddr+"/metrics", series)
		if err != nil {
			return nil, fmt.Errorf("replica %d: %w", i, err)
		}
		out[i] = v
	}
	return out, nil
}

func (f *Fleet) metricOf(ctx context.Context, url, series string) (float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	resp, err := f.health.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("/metrics: %s", resp.Status)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, fmt.Errorf("/metrics: %w", err)
	}
	return ParseMetric(string(body), series)
}

// ParseMetric finds series in a Prometheus text exposition and returns its
// value.
func ParseMetric(exposition, series string) (float64, error) {
	for line := range strings.Lines(exposition) {
		value, ok := strings.CutPrefix(strings.TrimSpace(line), series+" ")
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", series, err)
		}
		return v, nil
	}
	return 0, fmt.Errorf("no series %s in the metrics", series)
}

// ReadHealth reads the /healthz of the examples/server whose status port
// (-status-listen) is at addr: the agent's Status.
func ReadHealth(ctx context.Context, c *http.Client, addr string) (agentstatus.Status, error) {
	return ReadHealthURL(ctx, c, "http://"+addr+"/healthz")
}

// ReadHealthURL reads an agent's Status from url with c: an
// examples/server's /healthz, or a sidecar's.
func ReadHealthURL(ctx context.Context, c *http.Client, url string) (agentstatus.Status, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return agentstatus.Status{}, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return agentstatus.Status{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return agentstatus.Status{}, fmt.Errorf("/healthz: %s", resp.Status)
	}
	var st agentstatus.Status
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return agentstatus.Status{}, fmt.Errorf("/healthz: %w", err)
	}
	return st, nil
}

// WaitServing polls every replica's /healthz until cond holds for all of
// them, and returns their statuses. what names the awaited state in the
// error when ctx ends first.
func (f *Fleet) WaitServing(ctx context.Context, what string, cond func(agentstatus.Status) bool) ([]agentstatus.Status, error) {
	var last []agentstatus.Status
	var lastErr error
	for {
		sts, err := f.Health(ctx)
		if err == nil {
			all := true
			for _, st := range sts {
				all = all && cond(st)
			}
			if all {
				return sts, nil
			}
			last = sts
		}
		lastErr = err
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("fleet %s never all %s (%w; last error %w); last seen:\n%s", f.Name, what, ctx.Err(), lastErr, DescribeHealth(last))
		case <-time.After(pollEvery):
		}
	}
}

// ServingKey is a WaitServing condition: the replica serves id as its active
// key, at epoch minEpoch or later.
func ServingKey(id string, minEpoch int64) func(agentstatus.Status) bool {
	return func(st agentstatus.Status) bool { return st.ActiveKeyID == id && st.Epoch >= minEpoch }
}

// Holds reports whether a replica's status lists key id.
func Holds(st agentstatus.Status, id string) bool {
	for _, k := range st.Keys {
		if k.ID == id {
			return true
		}
	}
	return false
}

// DescribeHealth renders statuses one replica a line: epoch, active key and
// every key with its state. Key ids only.
func DescribeHealth(sts []agentstatus.Status) string {
	var b strings.Builder
	for i, st := range sts {
		fmt.Fprintf(&b, "  replica %d: epoch %d, active %s, keys", i, st.Epoch, orDash(st.ActiveKeyID))
		for _, k := range st.Keys {
			fmt.Fprintf(&b, " %s(%s)", k.ID, k.State)
		}
		if st.LastError != "" {
			fmt.Fprintf(&b, ", last error: %s", st.LastError)
		}
		b.WriteByte('\n')
	}
	return b.String()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// CPU returns the processor time the replicas' servers have used so far,
// summed: each process with its children (nginx's workers, those that
// are running and those that have exited).
func (f *Fleet) CPU() (time.Duration, error) {
	var sum time.Duration
	for _, r := range f.Replicas {
		t, err := r.Proc.TreeCPU()
		if err != nil {
			return 0, fmt.Errorf("replica %d: %w", r.Index, err)
		}
		sum += t
	}
	return sum, nil
}

// SidecarCPU returns the processor time the replicas' sidecars have used so
// far, summed; 0 without sidecars.
func (f *Fleet) SidecarCPU() (time.Duration, error) {
	var sum time.Duration
	for _, r := range f.Replicas {
		if r.Sidecar == nil {
			continue
		}
		t, err := r.Sidecar.CPU()
		if err != nil {
			return 0, fmt.Errorf("sidecar %d: %w", r.Index, err)
		}
		sum += t
	}
	return sum, nil
}

// ReplicaOf maps a backend address from a Sample to its replica index, or -1.
func (f *Fleet) ReplicaOf(addr string) int {
	for _, r := range f.Replicas {
		if r.Addr == addr {
			return r.Index
		}
	}
	return -1
}

// LoadConfig returns a load against the fleet's balancer with the fleet's
// trust roots; the caller sets the rest.
func (f *Fleet) LoadConfig(version uint16, clients, connsPerClient int, interval time.Duration) LoadConfig {
	return LoadConfig{Addr: f.LB.Addr(), Roots: f.pki.Roots, Version: version, Clients: clients, ConnsPerClient: connsPerClient, Interval: interval}
}

// Spread returns n delays from 0 to max, evenly spaced: replica 0 receives
// every change at once, the last one max later.
func Spread(n int, max time.Duration) []time.Duration {
	d := make([]time.Duration, n)
	for i := 1; i < n; i++ {
		d[i] = max * time.Duration(i) / time.Duration(n-1)
	}
	return d
}

package main

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"

	"github.com/ringmaster-io/ringmaster/internal/keyring"
	"github.com/ringmaster-io/ringmaster/internal/testing/atomicdir"
	"github.com/ringmaster-io/ringmaster/internal/testing/fleet"
)

// h3Config is what bench-http3 runs.
type h3Config struct {
	replicas, clients, rounds int
	duration, interval        time.Duration
	rotateEvery               time.Duration
}

// h3Fleet is replicas of examples/server -http3, on one ring rotating or
// each with crypto/tls's own keys.
type h3Fleet struct {
	name  string
	ring  bool
	procs []*fleet.Proc
	addrs []string
	vols  []*atomicdir.Writer
	// rotations counts the epochs written after the first.
	mu        sync.Mutex
	rotations int
}

// h3Cell is one fleet under one protocol, summed over rounds.
type h3Cell struct {
	reconnects, resumed, failed, rotations int
	cpu                                    time.Duration
}

// benchHTTP3Main is fleet bench-http3: resumption and server CPU per
// reconnect of agent-backed replicas over HTTP/3 and over HTTPS (TCP),
// on one rotating ring against per-replica keys. No control plane: the
// ring is written into each replica's volume as the kubelet would, one
// epoch per rotation, each key staged a rotation before it activates.
func benchHTTP3Main(ctx context.Context, args []string) (err error) {
	fs := flag.NewFlagSet("bench-http3", flag.ExitOnError)
	var cfg h3Config
	fs.IntVar(&cfg.replicas, "n", 3, "replicas in each fleet")
	fs.IntVar(&cfg.clients, "clients", 4, "concurrent clients, each with its own TLS session cache, each reconnect to a replica picked at random")
	fs.DurationVar(&cfg.interval, "interval", 50*time.Millisecond, "time between one client's reconnects")
	fs.DurationVar(&cfg.duration, "duration", 24*time.Second, "load per fleet and protocol, split into rounds")
	fs.IntVar(&cfg.rounds, "rounds", 3, "rounds the duration is split into; the cells take turns")
	fs.DurationVar(&cfg.rotateEvery, "rotate-every", 5*time.Second, "rotation period of the ring")
	keep := fs.Bool("keep", false, "keep the work directory (logs, volumes)")
	cert := fs.String("cert", string(fleet.ECDSAP256), "replicas' certificate key: ecdsa-p256 or rsa-2048")
	_ = fs.Parse(args)
	if cfg.replicas < 2 || cfg.clients < 1 || cfg.rounds < 1 || cfg.duration <= 0 || cfg.interval <= 0 || cfg.rotateEvery < time.Second {
		return errors.New("want -n >= 2, -clients >= 1, -rounds >= 1, -duration > 0, -interval > 0, -rotate-every >= 1s")
	}
	work, err := os.MkdirTemp("", "ringmaster-bench-http3-")
	if err != nil {
		return err
	}
	if !*keep {
		defer os.RemoveAll(work)
	} else {
		fmt.Fprintf(os.Stderr, "Work directory %s\n", work)
	}
	root, err := fleet.ModuleRoot(ctx)
	if err != nil {
		return err
	}
	bin := filepath.Join(work, "server")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./examples/server")
	build.Dir, build.Stdout, build.Stderr = root, os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		return fmt.Errorf("go build ./examples/server: %w", err)
	}
	pki, err := fleet.NewPKI(fleet.KeyType(*cert))
	if err != nil {
		return err
	}
	sup := fleet.NewSupervisor(work)
	defer func() { err = errors.Join(err, sup.StopAll()) }()

	ringName := "shop/web"
	epoch := 1
	var keys []keyring.Key // keys[i] active from t0 + i*rotateEvery
	t0 := time.Now()
	keyAt := func(i int) keyring.Key {
		for len(keys) <= i {
			var s keyring.Secret
			_, _ = rand.Read(s[:])
			k := keyring.NewKey(s)
			n := len(keys)
			k.ActiveFrom = t0.Add(time.Duration(n) * cfg.rotateEvery)
			k.RetireAt = k.ActiveFrom.Add(cfg.rotateEvery)
			k.ExpiresAt = k.RetireAt.Add(2 * cfg.rotateEvery)
			keys = append(keys, k)
		}
		return keys[i]
	}
	payload := func(e int) (map[string]atomicdir.File, error) {
		held := []keyring.Key{keyAt(e), keyAt(e - 1)} // staged, active
		if e >= 2 {
			held = append(held, keyAt(e-2))
		}
		if e >= 3 {
			held = append(held, keyAt(e-3))
		}
		data, err := keyring.Encode(keyring.Ring{Name: ringName, Epoch: int64(e), IssuedAt: time.Now(), Keys: held})
		if err != nil {
			return nil, err
		}
		files := pki.Files()
		files[keyring.FileName] = atomicdir.File{Data: data}
		return files, nil
	}

	fleets := []*h3Fleet{{name: "ring (the agent, one ring, rotating)", ring: true}, {name: "per-replica keys (crypto/tls's own)"}}
	for _, f := range fleets {
		for i := range cfg.replicas {
			dir := filepath.Join(work, fmt.Sprintf("%s-%d", map[bool]string{true: "ring", false: "own"}[f.ring], i))
			if err := os.MkdirAll(dir, 0o700); err != nil {
				return err
			}
			w, err := atomicdir.NewWriter(dir)
			if err != nil {
				return err
			}
			files := pki.Files()
			require := "cert"
			if f.ring {
				if files, err = payload(epoch); err != nil {
					return err
				}
				require = "keys,cert"
				f.vols = append(f.vols, w)
			}
			if err := w.Write(files); err != nil {
				return err
			}
			p, err := sup.Start(filepath.Base(dir), bin, []string{"-dir", dir, "-require", require, "-listen", "127.0.0.1:0", "-status-listen", "", "-http3", "-resync", "1s"})
			if err != nil {
				return err
			}
			line, err := p.WaitLine(ctx, "http3 listening on ")
			if err != nil {
				return err
			}
			f.procs = append(f.procs, p)
			f.addrs = append(f.addrs, line)
		}
	}
	// The ring rotates throughout: epoch e stages key e, and key e-1
	// activates by each replica's own clock at t0 + (e-1)*rotateEvery.
	rotCtx, stopRotating := context.WithCancel(ctx)
	var rotWG sync.WaitGroup
	rotWG.Go(func() {
		for {
			next := t0.Add(time.Duration(epoch) * cfg.rotateEvery)
			select {
			case <-rotCtx.Done():
				return
			case <-time.After(time.Until(next)):
			}
			epoch++
			files, err := payload(epoch)
			if err != nil {
				fmt.Fprintln(os.Stderr, "rotate:", err)
				return
			}
			for _, w := range fleets[0].vols {
				if err := w.Write(files); err != nil {
					fmt.Fprintln(os.Stderr, "rotate:", err)
				}
			}
			fleets[0].mu.Lock()
			fleets[0].rotations++
			fleets[0].mu.Unlock()
		}
	})
	defer func() {
		stopRotating()
		rotWG.Wait()
	}()

	protocols := []string{"HTTP/3", "HTTPS (TCP)"}
	cells := map[string]*h3Cell{}
	per := cfg.duration / time.Duration(cfg.rounds)
	for round := range cfg.rounds {
		for pi, proto := range protocols {
			for fi := range fleets {
				f := fleets[(fi+round+pi)%len(fleets)]
				key := proto + "\x00" + f.name
				if cells[key] == nil {
					cells[key] = &h3Cell{}
				}
				c, err := f.measure(ctx, cfg, pki, proto == "HTTP/3", per)
				if err != nil {
					return err
				}
				cell := cells[key]
				cell.reconnects += c.reconnects
				cell.resumed += c.resumed
				cell.failed += c.failed
				cell.cpu += c.cpu
				cell.rotations += c.rotations
				fmt.Fprintf(os.Stderr, "round %d/%d, %s, %s: %d reconnects, %.1f%% resumed, %d rotations\n",
					round+1, cfg.rounds, proto, f.name, c.reconnects, 100*float64(c.resumed)/float64(max(c.reconnects, 1)), c.rotations)
			}
		}
	}
	fmt.Printf("\n%d replicas per fleet, %d clients each reconnecting every %s to a replica picked at random (its first connection in each cell has no ticket), %s per cell in %d rounds; the ring rotates every %s (each key staged one rotation ahead); TLS 1.3, certificate key %s\n\n",
		cfg.replicas, cfg.clients, cfg.interval, cfg.duration, cfg.rounds, cfg.rotateEvery, *cert)
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "protocol\tkeys\treconnects\tresumed\tfailed\trotations\tserver CPU per reconnect\t")
	for _, proto := range protocols {
		for _, f := range fleets {
			c := cells[proto+"\x00"+f.name]
			fmt.Fprintf(w, "%s\t%s\t%d\t%.1f%%\t%d\t%d\t%.0f µs\t\n", proto, f.name, c.reconnects,
				100*float64(c.resumed)/float64(max(c.reconnects, 1)), c.failed, c.rotations,
				float64(c.cpu.Microseconds())/float64(max(c.reconnects, 1)))
		}
	}
	return w.Flush()
}

// measure puts the fleet under load over one protocol for d: clients
// reconnecting to replicas picked at random, each with its own session
// cache, which it keeps from one cell to the next of the same fleet and
// protocol no more than a real client keeps it across a deploy: it starts
// empty each time.
func (f *h3Fleet) measure(ctx context.Context, cfg h3Config, pki *fleet.PKI, h3 bool, d time.Duration) (h3Cell, error) {
	cpu := func() (time.Duration, error) {
		var sum time.Duration
		for _, p := range f.procs {
			c, err := p.CPU()
			if err != nil {
				return 0, err
			}
			sum += c
		}
		return sum, nil
	}
	f.mu.Lock()
	rotBefore := f.rotations
	f.mu.Unlock()
	before, err := cpu()
	if err != nil {
		return h3Cell{}, err
	}
	var mu sync.Mutex
	var out h3Cell
	deadline := time.Now().Add(d)
	var wg sync.WaitGroup
	for range cfg.clients {
		wg.Go(func() {
			tc := &tls.Config{RootCAs: pki.Roots, ServerName: fleet.ServerName, MinVersion: tls.VersionTLS13, ClientSessionCache: tls.NewLRUClientSessionCache(1)}
			for time.Now().Before(deadline) && ctx.Err() == nil {
				n, _ := rand.Int(rand.Reader, big.NewInt(int64(len(f.addrs))))
				resumed, err := reconnect(ctx, tc, f.addrs[n.Int64()], h3)
				mu.Lock()
				switch {
				case err != nil:
					out.failed++
				case resumed:
					out.resumed++
				}
				out.reconnects++
				mu.Unlock()
				time.Sleep(cfg.interval)
			}
		})
	}
	wg.Wait()
	after, err := cpu()
	if err != nil {
		return h3Cell{}, err
	}
	out.cpu = after - before
	f.mu.Lock()
	out.rotations = f.rotations - rotBefore
	f.mu.Unlock()
	return out, ctx.Err()
}

// reconnect makes one request on a new connection and reports whether its
// handshake resumed.
func reconnect(ctx context.Context, tc *tls.Config, addr string, h3 bool) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var rt http.RoundTripper
	if h3 {
		tr := &http3.Transport{TLSClientConfig: tc, QUICConfig: &quic.Config{}}
		defer tr.Close()
		rt = tr
	} else {
		tr := &http.Transport{TLSClientConfig: tc, DisableKeepAlives: true, ForceAttemptHTTP2: false}
		defer tr.CloseIdleConnections()
		rt = tr
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+addr+"/", nil)
	if err != nil {
		return false, err
	}
	resp, err := rt.RoundTrip(req)
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return false, err
	}
	if resp.TLS == nil {
		return false, errors.New("no TLS state")
	}
	return resp.TLS.DidResume, nil
}

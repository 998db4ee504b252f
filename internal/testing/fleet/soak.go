package fleet

import (
	"bufio"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/distribute"
	"github.com/ringmaster-io/ringmaster/internal/keyring"
)

// This file holds what make soak adds to the harness: a watch of every
// ring's snapshots, a load that hands each connection to a callback instead
// of keeping it (an hour of samples would otherwise be the harness's own
// growth), and readings of a process's memory and of a metrics endpoint.

// SnapshotSeen is one snapshot Secret as a watch reported it: which ring
// (namespace/name), which epoch, a digest of its data (never the data), and
// the ids of the keys it stages (those not yet encrypting when it was seen).
type SnapshotSeen struct {
	Ring   string
	Epoch  int64
	Digest string
	Staged []string
	At     time.Time
}

// WatchSnapshots watches the snapshot Secrets of every namespaced ring in
// the cluster and calls seen for each new one, and for each change of one
// (a snapshot is immutable: a change is a violation the caller's checker
// reports). A resync or relist that brings nothing new calls nothing. It
// returns when ctx ends.
func WatchSnapshots(ctx context.Context, cs kubernetes.Interface, seen func(SnapshotSeen)) {
	sel := labels.SelectorFromSet(map[string]string{v1alpha1.ComponentLabel: v1alpha1.ComponentSnapshot}).String()
	inf := coreinformers.NewFilteredSecretInformer(cs, metav1.NamespaceAll, 0, cache.Indexers{}, func(o *metav1.ListOptions) {
		o.LabelSelector = sel
	})
	// The informer's handlers run on one goroutine.
	lastRV := map[string]string{}
	onChange := func(obj any) {
		s, ok := obj.(*corev1.Secret)
		if !ok || s.Labels[v1alpha1.RingLabel] == "" {
			return
		}
		key := s.Namespace + "/" + s.Name
		if lastRV[key] == s.ResourceVersion {
			return
		}
		lastRV[key] = s.ResourceVersion
		x := SnapshotSeen{Ring: s.Namespace + "/" + s.Labels[v1alpha1.RingLabel], Epoch: distribute.SnapshotEpoch(s), Digest: DataDigest(s.Data), At: time.Now()}
		// A ring that does not decode leaves Staged empty; the digest still
		// counts its content.
		if r, err := keyring.Decode(s.Data[keyring.FileName]); err == nil {
			for _, k := range r.Keys {
				if k.ActiveFrom.After(x.At) {
					x.Staged = append(x.Staged, k.ID)
				}
			}
		}
		seen(x)
	}
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    onChange,
		UpdateFunc: func(_, obj any) { onChange(obj) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if s, ok := obj.(*corev1.Secret); ok {
				delete(lastRV, s.Namespace+"/"+s.Name)
			}
		},
	})
	inf.RunWithContext(ctx)
}

// DataDigest is a SHA-256 over a Secret's data, keys in order: equal data,
// equal digest. It names content without revealing it.
func DataDigest(data map[string][]byte) string {
	h := sha256.New()
	for _, k := range slices.Sorted(maps.Keys(data)) {
		fmt.Fprintf(h, "%s\x00%d\x00", k, len(data[k]))
		h.Write(data[k])
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// StreamLoad is a load that keeps nothing: each connection's Sample goes to
// a callback, so that a load of hours holds no more memory at the end than
// at the start.
type StreamLoad struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// StartStreamLoad starts cfg.Clients clients as StartLoad does (each with a
// session cache of its own, reconnecting about once per cfg.Interval,
// ConnsPerClient ignored: until Stop), and calls each with every
// connection's Sample, from the clients' goroutines.
func StartStreamLoad(ctx context.Context, cfg LoadConfig, each func(Sample)) *StreamLoad {
	ctx, cancel := context.WithCancel(ctx)
	l := &StreamLoad{cancel: cancel}
	if cfg.Timeout == 0 {
		cfg.Timeout = 10 * time.Second
	}
	for id := range cfg.Clients {
		l.wg.Go(func() {
			tc := &tls.Config{
				ServerName:         ServerName,
				RootCAs:            cfg.Roots,
				MinVersion:         cfg.Version,
				MaxVersion:         cfg.Version,
				ClientSessionCache: tls.NewLRUClientSessionCache(1),
				NextProtos:         []string{"http/1.1"},
			}
			next := time.Now()
			if cfg.Interval > 0 {
				next = next.Add(rand.N(cfg.Interval))
			}
			for seq := 0; ; seq++ {
				select {
				case <-ctx.Done():
					return
				case <-time.After(time.Until(next)):
				}
				if cfg.Interval > 0 {
					next = next.Add(cfg.Interval/2 + rand.N(cfg.Interval))
				}
				s := ConnectVia(ctx, cfg.Dial, cfg.Addr, tc, cfg.Timeout)
				if ctx.Err() != nil {
					return // cut short by Stop: not the fleet's failure
				}
				s.Client, s.Seq = id, seq
				each(s)
			}
		})
	}
	return l
}

// Stop ends the load and waits for its clients.
func (l *StreamLoad) Stop() {
	l.cancel()
	l.wg.Wait()
}

// ProcRSS returns a process's resident set size in bytes (VmRSS of
// /proc/PID/status).
func ProcRSS(pid int) (int64, error) {
	m, err := ProcMem(pid)
	return m.RSS, err
}

// Mem is a process's resident memory, in bytes.
type Mem struct {
	// RSS is all of it (VmRSS), the pages of its mapped binary included.
	RSS int64
	// Anon is its anonymous part (RssAnon): the heap, stacks and the
	// runtime's own, which only an exit gives back.
	Anon int64
}

// ProcMem reads a process's resident memory from /proc/PID/status.
func ProcMem(pid int) (Mem, error) {
	var m Mem
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return m, err
	}
	defer f.Close()
	fields := map[string]*int64{"VmRSS:": &m.RSS, "RssAnon:": &m.Anon}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		name, v, _ := strings.Cut(sc.Text(), "\t")
		dst, ok := fields[name]
		if !ok {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		if err != nil {
			return m, fmt.Errorf("/proc/%d/status %s %q: %w", pid, name, v, err)
		}
		*dst = kb << 10
		delete(fields, name)
	}
	if len(fields) > 0 {
		return m, fmt.Errorf("/proc/%d/status has no %s", pid, strings.Join(slices.Sorted(maps.Keys(fields)), " or "))
	}
	return m, sc.Err()
}

// Scrape reads a plain-HTTP Prometheus endpoint.
func Scrape(ctx context.Context, c *http.Client, url string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := c.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("%s: %s", url, resp.Status)
	}
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// SumMetric adds up every series of the metric name in a Prometheus text
// exposition, whatever its labels: rest_client_requests_total over codes,
// methods and hosts. A metric absent is an error.
func SumMetric(exposition, name string) (float64, error) {
	var sum float64
	found := false
	for line := range strings.Lines(exposition) {
		line = strings.TrimSpace(line)
		rest, ok := strings.CutPrefix(line, name)
		if !ok || rest == "" || (rest[0] != ' ' && rest[0] != '{') {
			continue
		}
		if rest[0] == '{' {
			end := strings.LastIndexByte(rest, '}')
			if end < 0 {
				return 0, fmt.Errorf("malformed series %q", line)
			}
			rest = rest[end+1:]
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			return 0, fmt.Errorf("malformed series %q", line)
		}
		v, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", line, err)
		}
		sum += v
		found = true
	}
	if !found {
		return 0, fmt.Errorf("no series %s in the metrics", name)
	}
	return sum, nil
}

// SumMetricBy adds up the series of the metric name in a Prometheus text
// exposition by the value of one label: rest_client_requests_total by
// method. Series without the label count under "".
func SumMetricBy(exposition, name, label string) map[string]float64 {
	out := map[string]float64{}
	for line := range strings.Lines(exposition) {
		line = strings.TrimSpace(line)
		rest, ok := strings.CutPrefix(line, name+"{")
		if !ok {
			continue
		}
		end := strings.LastIndexByte(rest, '}')
		if end < 0 {
			continue
		}
		f := strings.Fields(rest[end+1:])
		if len(f) == 0 {
			continue
		}
		v, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			continue
		}
		key := ""
		for pair := range strings.SplitSeq(rest[:end], ",") {
			if k, val, ok := strings.Cut(pair, "="); ok && k == label {
				key = strings.Trim(val, `"`)
			}
		}
		out[key] += v
	}
	return out
}

package fleet

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/testing/atomicdir"
)

// Target is one replica's volume as the projection syncer fills it.
type Target struct {
	// Dir is the replica's directory (the volume's mount point).
	Dir string
	// Delay is how long after the API server reports a change the files
	// change in Dir: this replica's kubelet sync lag.
	Delay time.Duration
	// Extra files are projected beside the Secret's, as a projected volume
	// combining the ticket key Secret with a kubernetes.io/tls Secret would.
	Extra map[string]atomicdir.File
}

// Delivery is one write of a Secret version into a replica's directory.
type Delivery struct {
	// Epoch is the ringmaster.io/epoch annotation of the Secret version.
	Epoch string
	// Seen is when the watch reported the version; Written when the files
	// changed in the directory.
	Seen, Written time.Time
}

// Syncer is a stand-in for the kubelet, which does not run here. It keeps one
// directory per replica in step with a Secret, as the kubelet keeps a
// Secret volume of a pod: it watches the Secret through the API server (a
// watch narrowed to the Secret's name by a field selector, as the kubelet's
// watch-based Secret manager does), and writes every version it sees into
// each replica's directory with internal/testing/atomicdir, a faithful port of the
// kubelet's AtomicWriter (timestamped directory, ..data symlink swapped by
// rename).
//
// What it does not model: the kubelet's periodic pod sync, which can skip
// versions that come and go between two syncs, and its cache TTL. Each
// replica here receives every version, in order, after a fixed delay of its
// own: a pessimistic stand-in for that lag, which is the part the rotation
// schedule must survive. A deleted Secret leaves the files in place, as the
// kubelet leaves a running pod's volume.
type Syncer struct {
	cs        kubernetes.Interface
	namespace string
	name      string
	targets   []Target
	writers   []*atomicdir.Writer
	queues    []chan update
	held      []atomic.Bool

	mu         sync.Mutex
	deliveries [][]Delivery
	errs       []error
}

type update struct {
	data  map[string][]byte
	epoch string
	seen  time.Time
}

// NewSyncer returns a syncer projecting Secret namespace/name into targets.
func NewSyncer(cs kubernetes.Interface, namespace, name string, targets []Target) (*Syncer, error) {
	s := &Syncer{cs: cs, namespace: namespace, name: name, targets: targets, deliveries: make([][]Delivery, len(targets)),
		held: make([]atomic.Bool, len(targets))}
	for _, t := range targets {
		w, err := atomicdir.NewWriter(t.Dir)
		if err != nil {
			return nil, err
		}
		s.writers = append(s.writers, w)
		// Room for far more versions than a replica's delay can hold back.
		s.queues = append(s.queues, make(chan update, 256))
	}
	return s, nil
}

// Run watches the Secret and delivers it until ctx ends. It returns once
// every replica's writer has stopped.
func (s *Syncer) Run(ctx context.Context) {
	var wg sync.WaitGroup
	for i := range s.targets {
		wg.Go(func() { s.deliver(ctx, i) })
	}
	inf := coreinformers.NewFilteredSecretInformer(s.cs, s.namespace, 0, cache.Indexers{}, func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("metadata.name", s.name).String()
	})
	var lastRV string
	onChange := func(obj any) {
		sec, ok := obj.(*corev1.Secret)
		if !ok || sec.ResourceVersion == lastRV { // handlers run on one goroutine
			return
		}
		lastRV = sec.ResourceVersion
		u := update{data: sec.Data, epoch: sec.Annotations[v1alpha1.EpochAnnotation], seen: time.Now()}
		for i, q := range s.queues {
			if s.held[i].Load() {
				continue
			}
			select {
			case q <- u:
			default:
				s.fail(fmt.Errorf("delivery queue full at epoch %s", u.epoch))
			}
		}
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    onChange,
		UpdateFunc: func(_, obj any) { onChange(obj) },
	}); err != nil {
		s.fail(err)
	}
	inf.RunWithContext(ctx) // returns when ctx ends
	wg.Wait()
}

// deliver writes the queued versions into replica i's directory, each once
// its delay has passed since the watch reported it.
func (s *Syncer) deliver(ctx context.Context, i int) {
	t := s.targets[i]
	for {
		var u update
		select {
		case <-ctx.Done():
			return
		case u = <-s.queues[i]:
		}
		if wait := time.Until(u.seen.Add(t.Delay)); wait > 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
		}
		payload := make(map[string]atomicdir.File, len(u.data)+len(t.Extra))
		for k, v := range u.data {
			payload[k] = atomicdir.File{Data: v} // 0644, a Secret volume's default mode
		}
		maps.Copy(payload, t.Extra)
		if err := s.writers[i].Write(payload); err != nil {
			s.fail(fmt.Errorf("replica %d: write epoch %s: %w", i, u.epoch, err))
			continue
		}
		s.mu.Lock()
		s.deliveries[i] = append(s.deliveries[i], Delivery{Epoch: u.epoch, Seen: u.seen, Written: time.Now()})
		s.mu.Unlock()
	}
}

func (s *Syncer) fail(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.errs = append(s.errs, err)
}

// Hold freezes replica i's volume: no version the watch reports from now
// on reaches it, as when a pod's kubelet stops syncing its volume. What
// the replica holds stays, and goes on ageing by its own clock.
func (s *Syncer) Hold(i int) { s.held[i].Store(true) }

// Deliveries returns what was written into replica i's directory so far.
func (s *Syncer) Deliveries(i int) []Delivery {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Delivery(nil), s.deliveries[i]...)
}

// Errors returns every failed delivery so far.
func (s *Syncer) Errors() []error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]error(nil), s.errs...)
}

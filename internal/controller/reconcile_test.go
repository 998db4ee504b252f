package controller

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/confirm"
	"github.com/ringmaster-io/ringmaster/internal/controller/dnsname"
	"github.com/ringmaster-io/ringmaster/internal/dnswork"
	"github.com/ringmaster-io/ringmaster/internal/dnszone"
	"github.com/ringmaster-io/ringmaster/internal/mint"
)

// The orchestration of each ring kind's reconcile, over a fake client that
// records every write: which writes a pass makes, in which order, and
// what it does when a status write meets a concurrent edit and when its
// key source fails. The suites on a real API server test the same
// reconciles end to end; these say, kind by kind, what one pass writes.

const home = "ringmaster-system"

// writes records the writes a pass makes, as "verb kind namespace/name".
type writes struct {
	mu  sync.Mutex
	log []string
	// conflicts is how many status writes are refused as stale.
	conflicts int
}

func (w *writes) add(verb string, obj client.Object, c client.Client) {
	gvk, _ := c.GroupVersionKindFor(obj)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.log = append(w.log, fmt.Sprintf("%s %s %s", verb, gvk.Kind, client.ObjectKeyFromObject(obj)))
}

func (w *writes) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.log
	w.log = nil
	return out
}

// fakeCluster is a fake client holding objs, whose writes are recorded.
func fakeCluster(t *testing.T, objs ...client.Object) (client.WithWatch, *writes) {
	t.Helper()
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, v1alpha1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	w := &writes{}
	base := fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).
		WithStatusSubresource(&v1alpha1.TicketKeyRing{}, &v1alpha1.ClusterTicketKeyRing{}, &v1alpha1.ECHKeyRing{}).
		WithIndex(&v1alpha1.ECHKeyRing{}, dnsname.ZoneRefIndex, func(o client.Object) []string {
			return []string{o.(*v1alpha1.ECHKeyRing).Spec.DNS.ZoneRef.Name}
		}).
		WithIndex(&v1alpha1.ECHKeyRing{}, dnsname.NameIndex, func(o client.Object) []string {
			return []string{dnszone.Canonical(o.(*v1alpha1.ECHKeyRing).Spec.DNS.Name)}
		}).
		WithIndex(&coordinationv1.Lease{}, dnsname.RecordOwnerIndex, func(o client.Object) []string {
			return []string{o.GetLabels()[v1alpha1.DNSOwnerUIDLabel]}
		}).
		Build()
	c := interceptor.NewClient(base, interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			w.add("create", obj, c)
			return c.Create(ctx, obj, opts...)
		},
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			w.add("update", obj, c)
			return c.Update(ctx, obj, opts...)
		},
		Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
			w.add("delete", obj, c)
			return c.Delete(ctx, obj, opts...)
		},
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			w.add("patch", obj, c)
			return c.Patch(ctx, obj, patch, opts...)
		},
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
			if patch.Type() != types.ApplyPatchType {
				w.add("patch "+sub, obj, c)
				return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
			}
			name := obj.GetName()
			w.mu.Lock()
			w.log = append(w.log, "apply status "+name)
			stale := w.conflicts > 0
			if stale {
				w.conflicts--
			}
			w.mu.Unlock()
			if stale {
				return apierrors.NewConflict(schema.GroupResource{Group: v1alpha1.GroupVersion.Group, Resource: "rings"}, name, fmt.Errorf("stale"))
			}
			return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
		},
	})
	return c, w
}

// ticketRings are the two ticket ring reconcilers over c, as Setup makes
// them (but for the cache: c is read as is).
func ticketRings(c client.Client, clk *clocktesting.FakeClock) (*TicketKeyRingReconciler, *ClusterTicketKeyRingReconciler) {
	shared := &rings{Client: c, secrets: &ringSecrets{Client: c, APIReader: c}, Recorder: events.NewFakeRecorder(100), Clock: clk,
		Sources: &mint.Sources{Reader: c, Client: c, Namespace: home, ServiceAccount: "ringmaster", Timeout: time.Second},
		Prober:  &confirm.Prober{}, gauges: newRingGauges(clk)}
	return &TicketKeyRingReconciler{rings: shared}, &ClusterTicketKeyRingReconciler{rings: shared, Namespace: home}
}

func ns(name string, labels map[string]string) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
}

func ringSpec() v1alpha1.TicketKeyRingSpec {
	return v1alpha1.TicketKeyRingSpec{RotationInterval: metav1.Duration{Duration: time.Hour}, RetainedKeys: 1,
		ActivationDelay: metav1.Duration{Duration: time.Minute}, Distribution: v1alpha1.Distribution{SecretName: "web-ticket-keys"}}
}

// A TicketKeyRing's pass: what it writes, in order, for a new ring, a ring
// in step, a rotate-now, a status write that meets a concurrent edit, and a
// key source that refuses it.
func TestTicketKeyRingReconcile(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	tkr := func(edit func(*v1alpha1.TicketKeyRing)) *v1alpha1.TicketKeyRing {
		r := &v1alpha1.TicketKeyRing{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web", UID: "u-web", Generation: 1}, Spec: ringSpec()}
		if edit != nil {
			edit(r)
		}
		return r
	}
	closed := &v1alpha1.ClusterKeySource{ObjectMeta: metav1.ObjectMeta{Name: "vault"}, Spec: v1alpha1.ClusterKeySourceSpec{
		NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"vault": "yes"}},
		Vault:             &v1alpha1.VaultSource{Address: "https://vault.example:8200"}}}
	for _, tc := range []struct {
		name string
		ring *v1alpha1.TicketKeyRing
		objs []client.Object
		// passes runs the reconcile this many times, the clock moved by
		// step between them; the writes of the last are checked.
		passes    int
		step      time.Duration
		before    func(*TicketKeyRingReconciler, client.Client, *writes)
		conflicts int
		want      []string
		ready     string // Ready's reason after the last pass
		requeue   bool   // the last pass asks to be run again soon, without an error
		errs      bool   // the last pass returns an error (backoff)
	}{
		{name: "a new ring: its first snapshot, then its projection, then its status, once", ring: tkr(nil), passes: 1,
			want:  []string{"create Secret shop/web-e1", "create Secret shop/web-ticket-keys", "apply status web"},
			ready: v1alpha1.ReasonPublished},
		{name: "a ring in step writes nothing", ring: tkr(nil), passes: 2,
			want: nil, ready: v1alpha1.ReasonPublished},
		{name: "a rotate-now: the next snapshot, the projection updated, the status with the request echoed", passes: 2, step: 2 * time.Minute,
			ring: tkr(nil),
			before: func(r *TicketKeyRingReconciler, c client.Client, _ *writes) {
				got := &v1alpha1.TicketKeyRing{}
				_ = c.Get(context.Background(), types.NamespacedName{Namespace: "shop", Name: "web"}, got)
				got.Annotations = map[string]string{v1alpha1.RotateRequestedAtAnnotation: t0.Add(2 * time.Minute).Format(time.RFC3339)}
				_ = c.Update(context.Background(), got)
			},
			want:  []string{"create Secret shop/web-e2", "update Secret shop/web-ticket-keys", "apply status web"},
			ready: v1alpha1.ReasonPublished},
		{name: "a status write that meets a concurrent edit is written again on the object as it is", ring: tkr(nil), passes: 1, conflicts: 1,
			want:  []string{"create Secret shop/web-e1", "create Secret shop/web-ticket-keys", "apply status web", "apply status web"},
			ready: v1alpha1.ReasonPublished},
		{name: "a key source that refuses the ring: nothing published, Ready False once", passes: 1,
			ring: tkr(func(r *v1alpha1.TicketKeyRing) { r.Spec.SourceRef = &v1alpha1.KeySourceReference{Name: "vault"} }),
			objs: []client.Object{closed},
			want: []string{"apply status web"}, ready: v1alpha1.ReasonKeySourceNotAllowed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := clocktesting.NewFakeClock(t0)
			c, w := fakeCluster(t, append([]client.Object{ns("shop", nil), tc.ring}, tc.objs...)...)
			r, _ := ticketRings(c, clk)
			req := reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "shop", Name: "web"}}
			var res reconcile.Result
			var err error
			for i := range tc.passes {
				if i == tc.passes-1 {
					if tc.before != nil {
						tc.before(r, c, w)
					}
					w.take()
					w.conflicts = tc.conflicts
				}
				res, err = r.Reconcile(context.Background(), req)
				clk.Step(tc.step)
			}
			if got := w.take(); !slices.Equal(got, tc.want) {
				t.Errorf("writes\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(tc.want, "\n  "))
			}
			if (err != nil) != tc.errs {
				t.Errorf("error %v, want one: %v", err, tc.errs)
			}
			got := &v1alpha1.TicketKeyRing{}
			if err := c.Get(context.Background(), req.NamespacedName, got); err != nil {
				t.Fatal(err)
			}
			if ready := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionReady); ready == nil || ready.Reason != tc.ready {
				t.Errorf("Ready %+v, want reason %s", ready, tc.ready)
			}
			if res.RequeueAfter <= 0 && err == nil {
				t.Errorf("no look again asked: %+v", res)
			}
		})
	}
}

// A ClusterTicketKeyRing's pass: its snapshot in the operator's namespace,
// a projection in each namespace it selects, and none in the others; a
// namespace that stops matching loses its projection.
func TestClusterTicketKeyRingReconcile(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	edge := &v1alpha1.ClusterTicketKeyRing{ObjectMeta: metav1.ObjectMeta{Name: "edge", UID: "u-edge", Generation: 1},
		Spec: v1alpha1.ClusterTicketKeyRingSpec{TicketKeyRingSpec: ringSpec(), NamespaceSelector: metav1.LabelSelector{MatchLabels: map[string]string{"tier": "edge"}}}}
	edge.Spec.Distribution.SecretName = "edge-ticket-keys"
	clk := clocktesting.NewFakeClock(t0)
	c, w := fakeCluster(t, ns(home, nil), ns("a", map[string]string{"tier": "edge"}), ns("b", map[string]string{"tier": "edge"}), ns("c", nil), edge)
	_, r := ticketRings(c, clk)
	req := reconcile.Request{NamespacedName: types.NamespacedName{Name: "edge"}}
	if _, err := r.Reconcile(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	want := []string{"create Secret " + home + "/edge-ce1", "create Secret a/edge-ticket-keys", "create Secret b/edge-ticket-keys", "apply status edge"}
	if got := w.take(); !slices.Equal(got, want) {
		t.Errorf("writes %q, want %q", got, want)
	}
	b := &corev1.Namespace{}
	_ = c.Get(context.Background(), types.NamespacedName{Name: "b"}, b)
	b.Labels = nil
	_ = c.Update(context.Background(), b)
	w.take()
	if _, err := r.Reconcile(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	if got := w.take(); !slices.Contains(got, "delete Secret b/edge-ticket-keys") || slices.ContainsFunc(got, func(s string) bool { return strings.HasPrefix(s, "create") }) {
		t.Errorf("writes %q, want b's projection deleted and nothing created", got)
	}
}

// An ECHKeyRing's pass: a ring whose zone does not exist writes its status
// alone; one that owns its name takes its finalizer first, in a pass of
// its own, then stages a config (snapshot, projection) and writes its
// status, its conditions dated by the operator's clock.
func TestECHKeyRingReconcile(t *testing.T) {
	t0 := time.Date(2031, 1, 2, 3, 4, 5, 0, time.UTC) // far from the wall clock
	ring := &v1alpha1.ECHKeyRing{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web", UID: "u-web", Generation: 1}, Spec: v1alpha1.ECHKeyRingSpec{
		PublicName: "public.example.test", RotationInterval: metav1.Duration{Duration: 24 * time.Hour}, DeliveryDelay: metav1.Duration{Duration: 5 * time.Minute},
		RetirementMargin: metav1.Duration{Duration: time.Hour}, RetainedConfigs: 1,
		KEM: v1alpha1.ECHKEMX25519, CipherSuites: []v1alpha1.ECHCipherSuite{{KDF: "HKDF-SHA256", AEAD: "AES-128-GCM"}},
		Confirmation: v1alpha1.Confirmation{Timeout: metav1.Duration{Duration: 10 * time.Minute}},
		DNS:          v1alpha1.ECHDNS{ZoneRef: v1alpha1.DNSZoneReference{Name: "z"}, Name: "www.example.test", TTL: 300},
		Distribution: v1alpha1.ECHDistribution{SecretName: "web-ech-keys"},
	}}
	zone := &v1alpha1.ClusterDNSZone{ObjectMeta: metav1.ObjectMeta{Name: "z"}, Spec: v1alpha1.ClusterDNSZoneSpec{
		Zone: "example.test", Servers: []string{"127.0.0.1:53"}, NamespaceSelector: &metav1.LabelSelector{}, AllowedNames: []string{"www.example.test"}}}
	record := dnszone.NewLease(home, dnszone.Record{Name: "www.example.test", Ring: v1alpha1.ECHKeyRingReference{Namespace: "shop", Name: "web", UID: "u-web"},
		Zone: "z", State: v1alpha1.DNSNameOwned, Since: t0})
	for _, tc := range []struct {
		name   string
		objs   []client.Object
		passes [][]string // the writes of each pass
		ready  string
	}{
		{name: "its zone does not exist: the status alone", passes: [][]string{{"apply status web"}}, ready: v1alpha1.ReasonDNSZoneNotFound},
		{name: "it owns its name: the finalizer, then a config staged", objs: []client.Object{zone, record},
			passes: [][]string{{"patch ECHKeyRing shop/web"}, {"create Secret shop/web-ech-e1", "create Secret shop/web-ech-keys", "apply status web"}},
			ready:  v1alpha1.ReasonAwaitingDNS},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := clocktesting.NewFakeClock(t0)
			c, w := fakeCluster(t, append([]client.Object{ns("shop", nil), ring.DeepCopy()}, tc.objs...)...)
			r := &ECHKeyRingReconciler{Client: c, APIReader: c, Recorder: events.NewFakeRecorder(100), Clock: clk,
				Sources: &mint.Sources{Reader: c, Client: c, Namespace: home, Timeout: time.Second}, Prober: &confirm.Prober{}, DNS: &dnswork.Worker{},
				Namespace: home, secrets: &ringSecrets{Client: c, APIReader: c}}
			req := reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "shop", Name: "web"}}
			for i, want := range tc.passes {
				if _, err := r.Reconcile(context.Background(), req); err != nil {
					t.Fatalf("pass %d: %v", i+1, err)
				}
				if got := w.take(); !slices.Equal(got, want) {
					t.Errorf("pass %d writes %q, want %q", i+1, got, want)
				}
			}
			got := &v1alpha1.ECHKeyRing{}
			if err := c.Get(context.Background(), req.NamespacedName, got); err != nil {
				t.Fatal(err)
			}
			ready := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionReady)
			if ready == nil || ready.Reason != tc.ready {
				t.Fatalf("Ready %+v, want reason %s", ready, tc.ready)
			}
			if !ready.LastTransitionTime.Time.Equal(t0) {
				t.Errorf("Ready dated %s, want the operator's clock %s", ready.LastTransitionTime.UTC(), t0)
			}
		})
	}
}

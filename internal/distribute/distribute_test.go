package distribute

import (
	"crypto/sha256"
	"errors"
	"maps"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/keyring"
)

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func testRing() keyring.Ring {
	plan := keyring.Next(t0, keyring.Policy{RotationInterval: time.Hour, RetainedKeys: 2, ActivationDelay: time.Minute},
		keyring.Ring{Name: "shop/web"}, keyring.Inputs{})
	r, err := plan.Fill([]keyring.Secret{sha256.Sum256([]byte("a")), sha256.Sum256([]byte("b"))})
	if err != nil {
		panic(err)
	}
	return r
}

func testOwner(formats ...v1alpha1.KeyFormat) Owner {
	return OwnerOf(&v1alpha1.TicketKeyRing{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web", UID: "uid-1"},
		Spec:       v1alpha1.TicketKeyRingSpec{Distribution: v1alpha1.Distribution{Formats: formats}},
	})
}

func clusterOwner() Owner {
	return ClusterOwnerOf(&v1alpha1.ClusterTicketKeyRing{
		ObjectMeta: metav1.ObjectMeta{Name: "edge", UID: "uid-2"},
		Spec:       v1alpha1.ClusterTicketKeyRingSpec{TicketKeyRingSpec: v1alpha1.TicketKeyRingSpec{Distribution: v1alpha1.Distribution{SecretName: "edge-keys"}}},
	}, "ringmaster-system")
}

func TestOwners(t *testing.T) {
	tests := []struct {
		name                                       string
		owner                                      Owner
		ringName, snapshot, snapshotNS, projection string
		label                                      string
	}{
		{"a TicketKeyRing keeps everything in its namespace", testOwner(), "shop/web", "web-e7", "shop", "web-ticket-keys", v1alpha1.RingLabel},
		{"a ClusterTicketKeyRing keeps its snapshots in the operator's namespace, under names no namespaced ring's snapshot can take",
			clusterOwner(), "edge", "edge-ce7", "ringmaster-system", "edge-keys", v1alpha1.ClusterRingLabel},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := tt.owner
			if got := o.RingName(); got != tt.ringName {
				t.Errorf("RingName = %q, want %q", got, tt.ringName)
			}
			if got := o.SnapshotName(7); got != tt.snapshot {
				t.Errorf("SnapshotName(7) = %q, want %q", got, tt.snapshot)
			}
			if o.Home != tt.snapshotNS || o.SecretName != tt.projection {
				t.Errorf("home %q, projection %q", o.Home, o.SecretName)
			}
			if o.SnapshotLabels()[tt.label] != o.Name || o.ProjectionLabels()[tt.label] != o.Name {
				t.Errorf("labels %v, %v: want %s=%s", o.SnapshotLabels(), o.ProjectionLabels(), tt.label, o.Name)
			}
		})
	}
}

func TestSnapshot(t *testing.T) {
	tests := []struct {
		name    string
		formats []v1alpha1.KeyFormat
		files   []string
	}{
		{"go only", []v1alpha1.KeyFormat{"go"}, []string{"ticketkeys.json"}},
		{"nginx and haproxy", []v1alpha1.KeyFormat{"go", "nginx", "haproxy"},
			[]string{"ticketkeys.json", "nginx.0.key", "nginx.1.key", "haproxy.keys"}},
		{"envoy", []v1alpha1.KeyFormat{"envoy"}, []string{"ticketkeys.json", "envoy.0.key", "envoy.1.key"}},
		{"cilium", []v1alpha1.KeyFormat{"cilium"}, []string{"ticketkeys.json", "tls.sessionticket.key", "tls.sessionticket.key.1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			owner := testOwner(tt.formats...)
			s, err := Snapshot(owner, testRing(), Requests{})
			if err != nil {
				t.Fatal(err)
			}
			if s.Name != "web-e1" || s.Namespace != "shop" {
				t.Errorf("snapshot %s/%s, want shop/web-e1", s.Namespace, s.Name)
			}
			if s.Immutable == nil || !*s.Immutable {
				t.Error("snapshot is not immutable")
			}
			if !owner.Owns(s) {
				t.Error("snapshot is not controlled by its ring")
			}
			if s.Type != SecretType {
				t.Errorf("type %q, want %q", s.Type, SecretType)
			}
			if s.Labels[v1alpha1.RingLabel] != "web" || s.Labels[v1alpha1.EpochLabel] != "1" || s.Labels[v1alpha1.ComponentLabel] != "snapshot" {
				t.Errorf("labels = %v", s.Labels)
			}
			// The record is the ring file alone; the projections carry
			// the derived files.
			if len(s.Data) != 1 || len(s.Data[keyring.FileName]) == 0 {
				t.Errorf("snapshot files = %d, want ticketkeys.json alone", len(s.Data))
			}
			p := Projection(owner, s, "shop")
			if len(p.Data) != len(tt.files) {
				t.Errorf("projection files = %d, want %v", len(p.Data), tt.files)
			}
			for _, f := range tt.files {
				if len(p.Data[f]) == 0 {
					t.Errorf("file %s missing", f)
				}
			}
			r := testRing()
			for _, f := range tt.formats {
				want, err := r.Files(keyring.Format(f), r.IssuedAt)
				if err != nil {
					t.Fatal(err)
				}
				for name, b := range want {
					if string(p.Data[name]) != string(b) {
						t.Errorf("%s: not the keys derived as of the epoch's issuedAt", name)
					}
				}
			}
			rec := Record(s)
			if rec.Err != nil {
				t.Fatal(rec.Err)
			}
			if rec.Epoch != 1 || rec.Ring.Epoch != 1 || len(rec.Ring.Keys) != 2 || rec.Ring.Keys[0].ID != testRing().Keys[0].ID || rec.RotateRequest != "" {
				t.Errorf("Record = %+v", rec)
			}
		})
	}

	s, err := Snapshot(testOwner(), testRing(), Requests{Rotate: "2026-11-30T12:00:00Z", Revoke: "2026-11-30T12:01:00Z"})
	if err != nil {
		t.Fatal(err)
	}
	if got := Record(s); got.RotateRequest != "2026-11-30T12:00:00Z" || got.RevokeRequest != "2026-11-30T12:01:00Z" {
		t.Errorf("the requests do not travel with their epoch: %+v", got)
	}
}

func TestProjection(t *testing.T) {
	for _, owner := range []Owner{testOwner("go"), clusterOwner()} {
		snap, err := Snapshot(owner, testRing(), Requests{})
		if err != nil {
			t.Fatal(err)
		}
		for _, ns := range []string{"shop", "shop-eu"} {
			p := Projection(owner, snap, ns)
			if p.Name != owner.SecretName || p.Namespace != ns {
				t.Errorf("%s: projection %s/%s", owner.Kind, p.Namespace, p.Name)
			}
			// A namespaced Secret may have a cluster-scoped owner: every
			// copy is owned, and garbage collected with its ring.
			if !owner.Owns(p) {
				t.Errorf("%s: projection in %s is not owned by its ring", owner.Kind, ns)
			}
			if p.Immutable != nil {
				t.Error("a projection must stay mutable: pods follow it")
			}
			want := labels.Merge(owner.ProjectionLabels(), map[string]string{ExcludeFromBackupLabel: "true"})
			if p.Annotations[v1alpha1.EpochAnnotation] != "1" || !labels.Equals(p.Labels, want) {
				t.Errorf("labels %v annotations %v", p.Labels, p.Annotations)
			}
			if !InSync(p, Projection(owner, snap, ns)) {
				t.Error("a projection is not in sync with itself")
			}
		}
	}
	owner := testOwner()
	snap, _ := Snapshot(owner, testRing(), Requests{})
	p := Projection(owner, snap, "shop")
	p.Data[keyring.FileName][0] ^= 1
	if InSync(p, Projection(owner, snap, "shop")) {
		t.Error("a hand-edited projection reads as in sync")
	}
	if string(snap.Data[keyring.FileName]) == string(p.Data[keyring.FileName]) {
		t.Error("the projection shares its data map with the snapshot")
	}
}

func TestDecide(t *testing.T) {
	owner := testOwner()
	e1, _ := Snapshot(owner, testRing(), Requests{})
	r2 := testRing()
	r2.Epoch = 2
	e2, _ := Snapshot(owner, r2, Requests{})
	want := Projection(owner, e2, "shop")

	other := OwnerOf(&v1alpha1.TicketKeyRing{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web", UID: "uid-recreated"}})
	edited := want.DeepCopy()
	edited.Data[keyring.FileName] = []byte(`{"version":1}`)
	retyped := want.DeepCopy()
	retyped.Type = corev1.SecretTypeOpaque
	foreign := want.DeepCopy()
	foreign.OwnerReferences = nil
	relabelled := want.DeepCopy()
	relabelled.Labels = map[string]string{"app": "mine"}
	// A Secret claiming a deleted ring of this name as its controller but
	// not labelled as the ring's is somebody's own: never removed.
	claimed := Projection(other, e1, "shop")
	claimed.Labels = map[string]string{"app": "mine"}
	retypedPredecessor := Projection(other, e1, "shop")
	retypedPredecessor.Type = corev1.SecretTypeOpaque
	foreignOpaque := foreign.DeepCopy()
	foreignOpaque.Type = corev1.SecretTypeOpaque
	ownedElsewhere := foreign.DeepCopy()
	ownedElsewhere.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: "mine", UID: "uid-cm"}}
	neighbour := Projection(OwnerOf(&v1alpha1.TicketKeyRing{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "api", UID: "uid-api"}}), e1, "shop")

	foreignNeighbour := neighbour.DeepCopy()
	foreignNeighbour.OwnerReferences = nil
	// As the operator's cache keeps projections: the data's digest.
	digested := func(s *corev1.Secret) *corev1.Secret {
		s = s.DeepCopy()
		s.Data = map[string][]byte{DigestKey: DataDigest(s.Data)}
		return s
	}
	// A hand edit that happens to look like the cache's form: its
	// "digest" is not the data's.
	forged := want.DeepCopy()
	forged.Data = map[string][]byte{DigestKey: make([]byte, 32)}

	tests := []struct {
		name       string
		have       *corev1.Secret
		want       Action
		wantEdited bool
	}{
		{"no Secret yet", nil, Create, false},
		{"in sync", want.DeepCopy(), Keep, false},
		{"an older epoch: routine", Projection(owner, e1, "shop"), Update, false},
		{"the same epoch with other content: edited by hand", edited, Update, true},
		{"in sync, as the cache keeps it", digested(want), Keep, false},
		{"an older epoch, as the cache keeps it", digested(Projection(owner, e1, "shop")), Update, false},
		{"edited by hand, as the cache keeps it", digested(edited), Update, true},
		{"edited by hand into the cache's form", forged, Update, true},
		{"labels edited away: still ours by owner reference", relabelled, Update, true},
		{"an Opaque Secret squatting the name with our owner reference: not ours to delete", retyped, Conflict, false},
		{"a Secret of ringmaster's labelled as the ring's that no ring controls (an orphan delete's): removed, the ring takes its place", foreign, Recreate, false},
		{"a Secret nobody owns, of another type", foreignOpaque, Conflict, false},
		{"a Secret nobody owns, labelled for another ring", foreignNeighbour, Conflict, false},
		{"a Secret of ringmaster's type something else owns", ownedElsewhere, Conflict, false},
		{"a Secret of a deleted ring of the same name (another UID): removed, as the garbage collector would", Projection(other, e1, "shop"), Recreate, false},
		{"a Secret naming a deleted ring of this name without its labels", claimed, Conflict, false},
		{"a deleted ring's Secret of another type: not ours to delete", retypedPredecessor, Conflict, false},
		{"a Secret of another ring", neighbour, Conflict, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ed := Decide(owner, tt.have, want)
			if got != tt.want || ed != tt.wantEdited {
				t.Errorf("Decide = %v (edited %v), want %v (edited %v)", got, ed, tt.want, tt.wantEdited)
			}
		})
	}

	// A ring being deleted prunes what it controls, and takes nothing
	// else, nor moves a projection back.
	deleting := owner
	deleting.Deleting = true
	r3 := testRing()
	r3.Epoch = 3
	e3, _ := Snapshot(owner, r3, Requests{})
	for _, tt := range []struct {
		name       string
		have       *corev1.Secret
		want       Action
		wantEdited bool
	}{
		{"being deleted: no Secret, none created", nil, Leave, false},
		{"being deleted: in sync", want.DeepCopy(), Keep, false},
		{"being deleted: its own at an older epoch is pruned", Projection(owner, e1, "shop"), Update, false},
		{"being deleted: its own edited by hand is restored", edited, Update, true},
		{"being deleted: its own at a later epoch is not moved back", Projection(owner, e3, "shop"), Leave, false},
		{"being deleted: stripped by an orphan delete, the orphan controller's", foreign, Leave, false},
		{"being deleted: a deleted ring's of the same name is not taken over", Projection(other, e1, "shop"), Leave, false},
		{"being deleted: another ring's", neighbour, Leave, false},
		{"being deleted: another type", retyped, Leave, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, ed := Decide(deleting, tt.have, want)
			if got != tt.want || ed != tt.wantEdited {
				t.Errorf("Decide = %v (edited %v), want %v (edited %v)", got, ed, tt.want, tt.wantEdited)
			}
		})
	}

	for _, have := range []*corev1.Secret{edited, digested(edited)} {
		up := Updated(have, want)
		if !InSync(up, want) || up.UID != edited.UID || Digested(up) {
			t.Error("Updated does not bring the Secret in line, or loses its identity, or writes a digest")
		}
	}
}

func TestRecordRefusesTampering(t *testing.T) {
	snap, err := Snapshot(testOwner("go"), testRing(), Requests{})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		mutate func(*corev1.Secret)
		want   string
	}{
		{"relabelled epoch", func(s *corev1.Secret) { s.Labels[v1alpha1.EpochLabel] = "7" }, `labelled epoch "7"`},
		{"corrupt ring file", func(s *corev1.Secret) { s.Data[keyring.FileName] = []byte(`{"version":1,`) }, "parse ticketkeys.json"},
		{"missing ring file", func(s *corev1.Secret) { delete(s.Data, keyring.FileName) }, "parse ticketkeys.json"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := snap.DeepCopy()
			tt.mutate(s)
			rec := Record(s)
			err := rec.Err
			if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), "shop/web-e1") {
				t.Fatalf("Record error = %v, want one naming shop/web-e1 and %q", err, tt.want)
			}
			if tt.name != "relabelled epoch" && !errors.Is(err, keyring.ErrInvalidRing) {
				t.Errorf("error does not wrap ErrInvalidRing: %v", err)
			}
			if len(rec.Ring.Keys) != 0 {
				t.Error("a refused snapshot still yields keys")
			}
		})
	}
	if got := SnapshotEpoch(&corev1.Secret{}); got != 0 {
		t.Errorf("SnapshotEpoch of an unlabelled Secret = %d, want 0", got)
	}
}

// A snapshot whose epoch would overflow keyring.NextEpoch is refused, even
// when its ring file agrees with its label.
func TestRecordRefusesEpochsBeyondTheBound(t *testing.T) {
	for _, tt := range []struct {
		epoch int64
		want  string // "" for accepted
	}{
		{MaxEpoch, ""},
		{MaxEpoch + 1, "labelled epoch 9007199254740992, above 9007199254740991"},
		{math.MaxInt64, "labelled epoch 9223372036854775807, above 9007199254740991"},
	} {
		r := testRing()
		r.Epoch = tt.epoch
		s, err := Snapshot(testOwner(), r, Requests{})
		if err != nil {
			t.Fatal(err)
		}
		rec := Record(s)
		switch {
		case tt.want == "" && rec.Err != nil:
			t.Errorf("epoch %d: refused: %v", tt.epoch, rec.Err)
		case tt.want == "" && keyring.NextEpoch(rec.Ring, 0) != MaxEpoch+1:
			t.Errorf("epoch %d: next epoch %d", tt.epoch, keyring.NextEpoch(rec.Ring, 0))
		case tt.want != "" && (rec.Err == nil || !strings.Contains(rec.Err.Error(), tt.want) || !strings.Contains(rec.Err.Error(), s.Name)):
			t.Errorf("epoch %d: error %v, want one naming %s and %q", tt.epoch, rec.Err, s.Name, tt.want)
		case tt.want != "" && len(rec.Ring.Keys) != 0:
			t.Errorf("epoch %d: a refused snapshot still yields keys", tt.epoch)
		}
	}
}

func TestTargets(t *testing.T) {
	ns := func(name string, l map[string]string, terminating bool) corev1.Namespace {
		n := corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: l}}
		if terminating {
			n.Status.Phase = corev1.NamespaceTerminating
		}
		return n
	}
	all := []corev1.Namespace{
		ns("shop-us", map[string]string{"tier": "edge"}, false),
		ns("kube-system", nil, false),
		ns("shop-eu", map[string]string{"tier": "edge"}, false),
		ns("shop-old", map[string]string{"tier": "edge"}, true),
	}
	edge := labels.SelectorFromSet(labels.Set{"tier": "edge"})
	if got := Targets(edge, all); !slices.Equal(got, []string{"shop-eu", "shop-us"}) {
		t.Errorf("Targets(tier=edge) = %v: want the matching namespaces in order, not the terminating one", got)
	}
	if got := Targets(labels.Everything(), all); !slices.Equal(got, []string{"kube-system", "shop-eu", "shop-us"}) {
		t.Errorf("Targets({}) = %v", got)
	}
}

func TestRingOf(t *testing.T) {
	tests := []struct {
		labels   map[string]string
		wantKind string
		wantKey  types.NamespacedName
	}{
		{map[string]string{v1alpha1.RingLabel: "web"}, v1alpha1.KindTicketKeyRing, types.NamespacedName{Namespace: "shop", Name: "web"}},
		{map[string]string{v1alpha1.ClusterRingLabel: "edge"}, v1alpha1.KindClusterTicketKeyRing, types.NamespacedName{Name: "edge"}},
		{map[string]string{"app": "web"}, "", types.NamespacedName{}},
	}
	for _, tt := range tests {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "x", Labels: tt.labels}}
		kind, key, ok := RingOf(s)
		if kind != tt.wantKind || key != tt.wantKey || ok != (tt.wantKind != "") {
			t.Errorf("RingOf(%v) = %s %v %v", tt.labels, kind, key, ok)
		}
	}
}

// A held staged key's due time travels with its snapshot, beside the ring
// file the replicas read.
func TestSnapshotRecordsDue(t *testing.T) {
	r := testRing()
	r.Due = t0.Add(time.Hour)
	s, err := Snapshot(testOwner(), r, Requests{})
	if err != nil {
		t.Fatal(err)
	}
	if got := Record(s); got.Err != nil || !got.Ring.Due.Equal(r.Due) {
		t.Errorf("Record = %v, due %v; want due %v", got.Err, got.Ring.Due, r.Due)
	}
	s.Annotations[v1alpha1.DueAnnotation] = "soon"
	if got := Record(s); got.Err == nil || !strings.Contains(got.Err.Error(), v1alpha1.DueAnnotation) {
		t.Errorf("a malformed due time: %v", got.Err)
	}
	plain, _ := Snapshot(testOwner(), testRing(), Requests{})
	if _, ok := plain.Annotations[v1alpha1.DueAnnotation]; ok || !Record(plain).Ring.Due.IsZero() {
		t.Error("a ring holding nothing records a due time")
	}
}

// TestExcludedFromBackups: every Secret that holds keys carries Velero's
// exclusion label, unless the owner keeps them in backups.
func TestExcludedFromBackups(t *testing.T) {
	for _, keep := range []bool{false, true} {
		owner := testOwner("nginx")
		owner.KeepInBackups = keep
		snap, err := Snapshot(owner, testRing(), Requests{})
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range []*corev1.Secret{snap, Projection(owner, snap, "shop")} {
			v, ok := s.Labels[ExcludeFromBackupLabel]
			if keep == ok || (ok && v != "true") {
				t.Errorf("KeepInBackups %v: %s has %s=%q (set %v)", keep, s.Name, ExcludeFromBackupLabel, v, ok)
			}
		}
		// The selectors are untouched: the label is not a ring's.
		if _, ok := owner.SnapshotLabels()[ExcludeFromBackupLabel]; ok {
			t.Error("the snapshot selector includes the backup label")
		}
	}
}

// TestProjectionOfOlderSnapshot: a snapshot an older operator wrote, with
// the derived files in it, gives the same projection as one without: an
// upgrade rewrites no projection, which would be one more copy of its keys.
func TestProjectionOfOlderSnapshot(t *testing.T) {
	owner := testOwner("nginx", "haproxy", "envoy", "cilium")
	snap, err := Snapshot(owner, testRing(), Requests{})
	if err != nil {
		t.Fatal(err)
	}
	older := snap.DeepCopy()
	r := testRing()
	for _, f := range owner.Formats {
		files, err := r.Files(keyring.Format(f), r.IssuedAt)
		if err != nil {
			t.Fatal(err)
		}
		maps.Copy(older.Data, files)
	}
	if len(older.Data) <= len(snap.Data) {
		t.Fatal("the older snapshot holds no derived file")
	}
	// What the older operator projected: the older snapshot's data.
	have := Projection(owner, snap, "shop")
	have.Data = older.DeepCopy().Data
	if !InSync(have, Projection(owner, snap, "shop")) || !InSync(have, Projection(owner, older, "shop")) {
		t.Error("a projection the older operator wrote is not in sync with the new one: an upgrade would rewrite it")
	}
}

//go:build integration

// Package atrest_test proves what ringmaster leaves below the API: it runs
// the operator on the loopback control plane, records every key the run
// mints (reading the snapshots through the API while they exist), lets keys
// expire and be destroyed, and then scans etcd's data directory (the bbolt
// file member/snap/db and the WAL) for each key's bytes in every encoding
// Secrets carry them in.
package atrest_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/controller"
	"github.com/ringmaster-io/ringmaster/internal/distribute"
	"github.com/ringmaster-io/ringmaster/internal/keyring"
	"github.com/ringmaster-io/ringmaster/internal/operator"
	"github.com/ringmaster-io/ringmaster/internal/testing/atrest"
	"github.com/ringmaster-io/ringmaster/internal/testing/testenv"
)

// rotations is how many rotations each run goes through: with retainedKeys
// 0, every key but the last two has expired and been destroyed by the end.
const rotations = 6

// TestKeysAtRest: with Secrets encrypted at rest, no key the run minted,
// expired or alive, is found in plaintext anywhere in etcd's files. With
// encryption off, the same scan finds the live keys (so the scan would see
// them), and it reports, as a figure and not an assertion, how many copies
// of each destroyed key survive and how long after the destruction.
//
// Both runs also count the writes that carried key bytes: each epoch of a
// TicketKeyRing is written exactly twice, its snapshot created and its
// projection updated.
func TestKeysAtRest(t *testing.T) {
	for _, tc := range []struct {
		name      string
		plaintext bool
	}{{"encrypted", false}, {"plaintext", true}} {
		t.Run(tc.name, func(t *testing.T) { run(t, tc.plaintext) })
	}
}

func run(t *testing.T, plaintext bool) {
	ctx := t.Context()
	clock := clocktesting.NewFakeClock(time.Now().Truncate(time.Second))
	env, err := testenv.StartSuite(ctx, testenv.SuiteOptions{
		Env: testenv.Options{Plaintext: plaintext}, NoLeaderElection: true,
		Operator: operator.Options{
			SkipNameValidation: true, // one operator per subtest
			Options:            controller.Options{Clock: clock},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Error(err)
		}
	})
	k8s := env.Client
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "atrest-"}}
	if err := k8s.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}

	// Every write of a Secret of the ring, as the watch sees it: each event
	// is one value etcd stored.
	wc, err := client.NewWithWatch(env.Config, client.Options{Scheme: k8s.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	w, err := wc.Watch(ctx, &corev1.SecretList{}, client.InNamespace(ns.Name))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	var writes []*corev1.Secret
	drain := func() {
		for {
			select {
			case ev := <-w.ResultChan():
				if s, ok := ev.Object.(*corev1.Secret); ok && (ev.Type == watch.Added || ev.Type == watch.Modified) && s.Type == distribute.SecretType {
					writes = append(writes, s)
				}
			case <-time.After(500 * time.Millisecond):
				return
			}
		}
	}

	ring := &v1alpha1.TicketKeyRing{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "web", Annotations: map[string]string{}}}
	ring.Spec.RotationInterval = metav1.Duration{Duration: time.Minute}
	ring.Spec.ActivationDelay = metav1.Duration{Duration: 10 * time.Second}
	ring.Spec.Distribution.Formats = []v1alpha1.KeyFormat{v1alpha1.KeyFormat(keyring.FormatNginx), v1alpha1.KeyFormat(keyring.FormatHAProxy), v1alpha1.KeyFormat(keyring.FormatEnvoy)}
	if err := k8s.Create(ctx, ring); err != nil {
		t.Fatal(err)
	}

	keys := map[string]keyring.Key{} // every key minted, by id
	gone := map[string]time.Time{}   // when each destroyed key was last seen through the API
	record := func(epoch int64) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			got := &v1alpha1.TicketKeyRing{}
			if err := k8s.Get(ctx, client.ObjectKeyFromObject(ring), got); err != nil {
				t.Fatal(err)
			}
			if got.Status.Epoch >= epoch {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("epoch %d not published: status %+v", epoch, got.Status)
			}
			time.Sleep(50 * time.Millisecond)
		}
		snaps := &corev1.SecretList{}
		if err := k8s.List(ctx, snaps, client.InNamespace(ns.Name), client.MatchingLabels{v1alpha1.RingLabel: ring.Name, v1alpha1.ComponentLabel: v1alpha1.ComponentSnapshot}); err != nil {
			t.Fatal(err)
		}
		live := map[string]bool{}
		for _, s := range snaps.Items {
			r, err := keyring.Decode(s.Data[keyring.FileName])
			if err != nil {
				t.Fatalf("snapshot %s: %v", s.Name, err)
			}
			for _, k := range r.Keys {
				keys[k.ID], live[k.ID] = k, true
			}
		}
		for id := range keys {
			if _, ok := gone[id]; !ok && !live[id] {
				gone[id] = time.Now()
			}
		}
	}
	record(1)
	for i := range rotations {
		clock.Step(time.Minute)
		if err := testenv.Update(ctx, k8s, &v1alpha1.TicketKeyRing{ObjectMeta: ring.ObjectMeta}, func(r *v1alpha1.TicketKeyRing) {
			r.Annotations["test.ringmaster.io/poke"] = fmt.Sprint(i)
		}); err != nil {
			t.Fatal(err)
		}
		record(int64(i + 2))
	}
	drain()

	// Each epoch written twice: its snapshot, then its projection.
	epochs := map[string]int{}
	for _, s := range writes {
		epochs[s.Labels[v1alpha1.EpochLabel]+s.Annotations[v1alpha1.EpochAnnotation]]++
	}
	for epoch := 1; epoch <= rotations+1; epoch++ {
		if n := epochs[fmt.Sprint(epoch)]; n != 2 {
			t.Errorf("epoch %d was written %d times, want 2 (snapshot and projection)", epoch, n)
		}
	}
	perKey := map[string]int{}
	for _, s := range writes {
		for id, k := range keys {
			if holds(s, k) {
				perKey[id]++
			}
		}
	}
	t.Logf("%d writes of the ring's Secrets over %d epochs; writes per key: %v", len(writes), rotations+1, perKey)

	// Through the API, a destroyed key is in no Secret (the bound the
	// operator keeps itself).
	all := &corev1.SecretList{}
	if err := k8s.List(ctx, all); err != nil {
		t.Fatal(err)
	}
	for id := range gone {
		for _, s := range all.Items {
			if holds(&s, keys[id]) {
				t.Errorf("destroyed key %s is still in Secret %s/%s", id, s.Namespace, s.Name)
			}
		}
	}
	if len(gone) < rotations-1 {
		t.Fatalf("%d keys destroyed over %d rotations, want at least %d", len(gone), rotations, rotations-1)
	}

	// What etcd's files hold, read as a copy of the data directory would be,
	// at once or, for a figure of how long the plaintext lingers,
	// RINGMASTER_ATREST_LINGER later (kube-apiserver compacts etcd every 5
	// minutes).
	if d, err := time.ParseDuration(os.Getenv("RINGMASTER_ATREST_LINGER")); err == nil && plaintext {
		t.Logf("waiting %s before the scan", d)
		time.Sleep(d)
	}
	files := scan(t, env.EtcdDataDir())
	snapKey := fmt.Sprintf("/registry/secrets/%s/%s", ns.Name, distribute.OwnerOf(ring).SnapshotName(rotations+1))
	value := etcdGet(t, env.EtcdURL(), snapKey)
	const prefix = "k8s:enc:secretbox:v1:ringmaster:"
	if plaintext {
		if bytes.HasPrefix(value, []byte("k8s:enc:")) {
			t.Errorf("etcd holds %s encrypted with encryption off", snapKey)
		}
		for id, k := range keys {
			if _, dead := gone[id]; !dead && total(files, k) == 0 {
				t.Errorf("live key %s not found in etcd's plaintext files: the scan would miss a key", id)
			}
		}
		ids := make([]string, 0, len(gone))
		for id := range gone {
			ids = append(ids, id)
		}
		slices.SortFunc(ids, func(a, b string) int { return gone[a].Compare(gone[b]) })
		for _, id := range ids {
			t.Logf("FIGURE destroyed key %s, %.0fs after its snapshot was deleted: in member/snap %d copies of its ring file entry and %d derived keys; in the WAL %d and %d",
				id, time.Since(gone[id]).Seconds(), count(files, keys[id], "member/snap", true), count(files, keys[id], "member/snap", false),
				count(files, keys[id], "member/wal", true), count(files, keys[id], "member/wal", false))
		}
		return
	}
	if !bytes.HasPrefix(value, []byte(prefix)) {
		t.Errorf("etcd's value of %s starts %q, want %q", snapKey, value[:min(len(value), len(prefix))], prefix)
	}
	for id, k := range keys {
		if n := total(files, k); n > 0 {
			t.Errorf("key %s found %d times in plaintext in etcd's files: %v", id, n, where(files, k))
		}
	}
	t.Logf("FIGURE encrypted: 0 plaintext copies of the %d keys minted (%d destroyed) in %d files of etcd's data directory", len(keys), len(gone), len(files))
}

// holds reports whether s carries any trace of k.
func holds(s *corev1.Secret, k keyring.Key) bool {
	for _, v := range s.Data {
		if len(atrest.FindTraces(v, k.Secret)) > 0 {
			return true
		}
	}
	return false
}

// scan reads every regular file under dir, by path relative to it.
func scan(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		out[rel] = b
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(out) == 0 {
		t.Fatalf("no file under %s", dir)
	}
	return out
}

// count is how many times k's bytes occur in the files under prefix: its
// secret as ticketkeys.json carries it (base64), or else the keys derived
// for the other formats, in either encoding.
func count(files map[string][]byte, k keyring.Key, prefix string, ringFile bool) int {
	n := 0
	for path, b := range files {
		if !strings.HasPrefix(path, prefix) {
			continue
		}
		for name, tr := range atrest.KeyTraces(k.Secret) {
			if (name == "base64") == ringFile {
				n += bytes.Count(b, tr)
			}
		}
	}
	return n
}

func total(files map[string][]byte, k keyring.Key) int {
	return count(files, k, "", true) + count(files, k, "", false)
}

func where(files map[string][]byte, k keyring.Key) []string {
	var out []string
	for path, b := range files {
		if t := atrest.FindTraces(b, k.Secret); len(t) > 0 {
			out = append(out, fmt.Sprintf("%s: %v", path, t))
		}
	}
	return out
}

// etcdGet reads key's value from etcd directly, through its JSON gateway,
// as "etcdctl get" would: what an etcd backup holds.
func etcdGet(t *testing.T, etcdURL, key string) []byte {
	t.Helper()
	body := fmt.Sprintf(`{"key":%q}`, base64.StdEncoding.EncodeToString([]byte(key)))
	resp, err := http.Post(etcdURL+"/v3/kv/range", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		KVs []struct {
			Value []byte `json:"value"`
		} `json:"kvs"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	if len(out.KVs) != 1 {
		t.Fatalf("etcd has %d values of %s", len(out.KVs), key)
	}
	return out.KVs[0].Value
}

//go:build cluster

package cluster_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/keyring"
	"github.com/ringmaster-io/ringmaster/internal/testing/atrest"
)

// atRestRing rotates under retainedKeys 0, so that each rotate-now
// destroys the key it retires.
const atRestRing = "atrest"

// keysAtRest creates a ring that destroys a key at every rotation, rotates
// it, records every key both rings minted (through their snapshots, while
// they exist), and then scans etcd's data directory: with Secrets
// encrypted at rest, no key is found in plaintext, raw or base64, ring
// file or derived. It returns how many keys it looked for, and how many
// of them were destroyed.
func keysAtRest(ctx context.Context) (minted, destroyed int) {
	GinkgoHelper()
	Expect(cl.Client.Create(ctx, &v1alpha1.TicketKeyRing{
		ObjectMeta: metav1.ObjectMeta{Namespace: shopNS, Name: atRestRing},
		Spec: v1alpha1.TicketKeyRingSpec{
			RotationInterval: metav1.Duration{Duration: time.Hour},
			ActivationDelay:  metav1.Duration{Duration: time.Second},
			Distribution:     v1alpha1.Distribution{Formats: []v1alpha1.KeyFormat{"nginx", "haproxy", "envoy"}},
		},
	})).To(Succeed())
	keys := map[string]keyring.Key{}
	record := func() map[string]bool {
		live := map[string]bool{}
		snaps := &corev1.SecretList{}
		Expect(cl.Client.List(ctx, snaps, client.InNamespace(shopNS), client.MatchingLabels{v1alpha1.ComponentLabel: v1alpha1.ComponentSnapshot})).To(Succeed())
		for _, s := range snaps.Items {
			r, err := keyring.Decode(s.Data[keyring.FileName])
			Expect(err).NotTo(HaveOccurred(), "snapshot %s", s.Name)
			for _, k := range r.Keys {
				keys[k.ID], live[k.ID] = k, true
			}
		}
		return live
	}
	_, err := cl.WaitRing(ctx, shopNS, atRestRing, "Ready", func(r *v1alpha1.TicketKeyRing) bool { return r.Status.Epoch > 0 })
	Expect(err).NotTo(HaveOccurred())
	record()
	for range 3 {
		_, err := cl.Rotate(ctx, shopNS, atRestRing)
		Expect(err).NotTo(HaveOccurred())
		record()
	}
	live := record()
	destroyed = len(keys) - len(live)
	Expect(destroyed).To(BeNumerically(">=", 3), "each rotate-now under retainedKeys 0 destroys a key")

	dir := filepath.Join("/var/lib", clusterName, "etcd")
	var files []string
	Expect(filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		files = append(files, path)
		for id, k := range keys {
			Expect(atrest.FindTraces(b, k.Secret)).To(BeEmpty(), "key %s (live %v) in plaintext in %s", id, live[id], path)
		}
		return nil
	})).To(Succeed())
	Expect(files).To(ContainElement(HaveSuffix("member/snap/db")))

	// etcd's own value of the newest snapshot, read around kube-apiserver
	// as etcdctl get would, through etcd's JSON gateway in the cluster's
	// network namespace.
	ring, err := cl.GetRing(ctx, shopNS, atRestRing)
	Expect(err).NotTo(HaveOccurred())
	body := fmt.Sprintf(`{"key":%q}`, base64.StdEncoding.EncodeToString([]byte("/registry/secrets/"+shopNS+"/"+ring.Status.Snapshot)))
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DialContext: dialer.DialContext}}
	resp, err := hc.Post("http://127.0.0.1:2379/v3/kv/range", "application/json", strings.NewReader(body))
	Expect(err).NotTo(HaveOccurred())
	defer resp.Body.Close()
	var out struct {
		KVs []struct {
			Value []byte `json:"value"`
		} `json:"kvs"`
	}
	Expect(json.NewDecoder(resp.Body).Decode(&out)).To(Succeed())
	Expect(out.KVs).To(HaveLen(1))
	Expect(bytes.HasPrefix(out.KVs[0].Value, []byte("k8s:enc:secretbox:v1:ringmaster:"))).To(BeTrue(), "etcd's value of %s", ring.Status.Snapshot)
	return len(keys), destroyed
}

//go:build integration

package controller_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
)

var _ = Describe("config/samples", func() {
	It("holds ringmaster objects of every kind that the API server accepts as shipped", func(ctx context.Context) {
		files, err := filepath.Glob("../../config/samples/ringmaster_v1alpha1_*.yaml")
		Expect(err).NotTo(HaveOccurred())
		ns := newNamespace(ctx)
		kinds := map[string]bool{}
		for _, f := range files {
			data, err := os.ReadFile(f)
			Expect(err).NotTo(HaveOccurred())
			for _, doc := range bytes.Split(data, []byte("\n---")) {
				u := &unstructured.Unstructured{}
				Expect(yaml.Unmarshal(doc, &u.Object)).To(Succeed(), f)
				if u.GetAPIVersion() != v1alpha1.GroupVersion.String() {
					continue
				}
				if !strings.HasPrefix(u.GetKind(), "Cluster") && u.GetKind() != v1alpha1.KindCertificatePolicy {
					u.SetNamespace(ns)
				}
				Expect(k8s.Create(ctx, u, client.DryRunAll)).To(Succeed(), "%s: %s", f, u.GetKind())
				kinds[u.GetKind()] = true
			}
		}
		Expect(kinds).To(HaveKey(v1alpha1.KindTicketKeyRing))
		Expect(kinds).To(HaveKey(v1alpha1.KindClusterTicketKeyRing))
		Expect(kinds).To(HaveKey(v1alpha1.KindCertificatePolicy))
		Expect(kinds).To(HaveKey(v1alpha1.KindECHKeyRing))
		Expect(kinds).To(HaveKey(v1alpha1.KindClusterDNSZone))
	})
})

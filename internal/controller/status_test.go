//go:build integration

package controller_test

import (
	"context"
	"errors"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/ringmaster-io/ringmaster/internal/controller/apply"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

var _ = Describe("Status writes", func() {
	It("take a write that meets a concurrent edit as the retry it is: a requeue, not a reconciler error", func() {
		ctx := context.Background()
		ns := newNamespace(ctx)
		ring := createRing(ctx, ns, "web", nil)
		waitEpoch(ctx, ring, 1)
		Expect(decode(getSecret(ctx, ns, "web-ticket-keys")).Keys).NotTo(BeEmpty())
		stale := getRing(ctx, ring)

		By("an edit after the status was computed")
		fresh := stale.DeepCopy()
		fresh.Labels = map[string]string{"example.com/touched": "yes"}
		Expect(k8s.Update(ctx, fresh)).To(Succeed())

		next := stale.Status.DeepCopy()
		next.LastRotateRequestedAt = "2000-01-01T00:00:00Z"
		err := apply.Status(ctx, k8s, stale, stale.Status, *next)
		Expect(errors.Is(err, apply.ErrStale)).To(BeTrue(), "the write of a stale status: %v", err)
		Expect(getRing(ctx, ring).Status.LastRotateRequestedAt).NotTo(Equal(next.LastRotateRequestedAt), "the stale status was written")

		res, err := apply.Result(reconcile.Result{}, errors.Join(nil, err))
		Expect(err).NotTo(HaveOccurred())
		Expect(res.RequeueAfter).To(BeNumerically(">", 0))

		boom := errors.New("list namespaces: the API server is down")
		_, err = apply.Result(reconcile.Result{}, errors.Join(boom, apply.ErrStale))
		Expect(err).To(MatchError(boom), "a real error beside the conflict is still an error")
	})
})

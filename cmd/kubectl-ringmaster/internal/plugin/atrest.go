package plugin

import (
	"context"
	"fmt"
	"io"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/cmd/kubectl-ringmaster/internal/audit"
	"github.com/ringmaster-io/ringmaster/internal/distribute"
)

// atRest reads what the posture at rest needs: the Secrets holding keys,
// by their metadata alone (their data never reaches the audit), and how
// kube-apiserver writes Secrets, from its /metrics.
func (r *auditReader) atRest(ctx context.Context) error {
	sel := labels.NewSelector()
	req, err := labels.NewRequirement(v1alpha1.ComponentLabel, selection.In, []string{v1alpha1.ComponentSnapshot, v1alpha1.ComponentProjection})
	if err != nil {
		return err
	}
	list := &metav1.PartialObjectMetadataList{}
	list.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("SecretList"))
	err = r.c.List(ctx, list, client.InNamespace(r.ns), client.MatchingLabelsSelector{Selector: sel.Add(*req)})
	if skipped, err := r.refused(err, "Secrets "+r.where+" were not listed, so the Secrets holding keys are not counted nor checked for backups", audit.AtRest); err != nil {
		return err
	} else if !skipped {
		r.in.KeySecrets = []audit.KeySecret{}
		for _, s := range list.Items {
			r.in.KeySecrets = append(r.in.KeySecrets, audit.KeySecret{Namespace: s.Namespace, Name: s.Name,
				Component: s.Labels[v1alpha1.ComponentLabel], Excluded: s.Labels[distribute.ExcludeFromBackupLabel] == "true"})
		}
	}
	body, err := r.core.Get().AbsPath("/metrics").DoRaw(ctx)
	if skipped, err := r.refused(err, "the API server's /metrics were not read, so encryption at rest is not checked", audit.AtRest); skipped {
		return err
	}
	r.in.Encryption, r.in.Provider, err = audit.EncryptionFromMetrics(body)
	return err
}

// printPosture prints the keys' posture at rest.
func printPosture(w io.Writer, p *audit.Posture) {
	if p == nil {
		return
	}
	fmt.Fprintln(w, "\nKeys at rest:")
	fmt.Fprintf(w, "  Secrets holding keys: %d snapshot(s) and %d projection(s) (type %s)", p.Snapshots, p.Projections, distribute.SecretType)
	if len(p.Namespaces) > 0 {
		fmt.Fprintf(w, " in %v", p.Namespaces)
	}
	fmt.Fprintln(w)
	if len(p.InBackups) == 0 {
		fmt.Fprintf(w, "  Backups: every one is labelled %s=true\n", distribute.ExcludeFromBackupLabel)
	}
	switch p.Encryption {
	case audit.EncryptionOn:
		fmt.Fprintf(w, "  Encryption at rest: on, by the API server's metrics (Secrets written as %s)\n", p.Provider)
	case audit.EncryptionOff:
		fmt.Fprintln(w, "  Encryption at rest: off, by the API server's metrics")
	case audit.EncryptionUnknown:
		fmt.Fprintln(w, "  Encryption at rest: not shown by the API server's metrics (most likely off)")
	default:
		fmt.Fprintln(w, "  Encryption at rest: not checked")
	}
	fmt.Fprintln(w, "  Encryption at rest must be on. The operator cannot see how kube-apiserver stores Secrets; check it in etcd on a control-plane node:")
	verify := p.Verify
	if verify == "" {
		verify = "ETCDCTL_API=3 etcdctl get /registry/secrets/<namespace>/<ring>-e<epoch> --print-value-only | head -c 32"
	}
	fmt.Fprintf(w, "    %s\n  prints k8s:enc:<provider>:v1:<key name>: when it is encrypted, k8s followed by binary when it is not.\n", verify)
	for _, pr := range p.Problems {
		fmt.Fprintf(w, "  Problem: %s\n", pr.Message)
	}
}

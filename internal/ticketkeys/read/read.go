// Package read lists, page by page and as whoever its client is, every
// object that may hold a session-ticket key no ring manages, and keeps of
// each only what ticketkeys.Scan keeps (never a key's bytes). The kubectl
// plugin's audit and the operator's both read through it;
// internal/ticketkeys itself stays free of clients.
package read

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ringmaster-io/ringmaster/internal/ticketkeys"
)

// Page bounds how many objects one list request returns: each page is
// reduced to its summaries before the next is read, so no object's data
// is held for long.
const Page = 250

// kinds are the custom resources that may hold Envoy's session ticket
// keys. Which of them the cluster serves, and at which version, is asked
// of discovery (the REST mapper) at each read.
var kinds = []struct {
	gk      schema.GroupKind
	cluster bool
}{
	{gk: schema.GroupKind{Group: ticketkeys.GroupIstio, Kind: ticketkeys.KindEnvoyFilter}},
	{gk: schema.GroupKind{Group: ticketkeys.GroupEnvoyGateway, Kind: ticketkeys.KindEnvoyPatchPolicy}},
	{gk: schema.GroupKind{Group: ticketkeys.GroupCilium, Kind: ticketkeys.KindCiliumEnvoyConfig}},
	{gk: schema.GroupKind{Group: ticketkeys.GroupCilium, Kind: ticketkeys.KindCiliumClusterwideEnvoyConfig}, cluster: true},
}

// secretsWithoutKeys are the Secret types that hold no ticket key and are
// not read for them: TLS Secrets (whose private keys are never decoded),
// service account tokens and Helm's releases.
var secretsWithoutKeys = []string{string(corev1.SecretTypeTLS), string(corev1.SecretTypeServiceAccountToken), "helm.sh/release.v1"}

// Outcome is what became of one resource's list.
type Outcome int

const (
	// Done: every page was read.
	Done Outcome = iota
	// NotInstalled: the cluster does not serve the kind.
	NotInstalled
	// Skipped: a cluster-scoped kind, and the read was of one namespace.
	Skipped
	// Refused: the client may not list it (Err says how).
	Refused
)

// Source is one resource read, or not, and why.
type Source struct {
	// Resource is the group-resource, e.g. "envoyfilters.networking.istio.io".
	Resource string
	Outcome  Outcome
	// Err is the API server's answer when Refused.
	Err error
}

// Result is what a read kept.
type Result struct {
	Summaries []ticketkeys.Summary
	Sources   []Source
}

// All reads ConfigMaps, Secrets (but secretsWithoutKeys) and the Envoy
// kinds the cluster serves, in namespace ("" for every namespace). A list
// refused or not served is recorded in Sources, never an error.
func All(ctx context.Context, c client.Reader, mapper meta.RESTMapper, namespace string) (Result, error) {
	var res Result
	list := func(resource string, l client.ObjectList, scan func() []ticketkeys.Object, opts ...client.ListOption) error {
		var cont string
		for {
			err := c.List(ctx, l, append(opts, client.InNamespace(namespace), client.Limit(Page), client.Continue(cont))...)
			switch {
			case meta.IsNoMatchError(err) || apierrors.IsNotFound(err):
				// NotFound: the kind was removed since discovery answered.
				res.Sources = append(res.Sources, Source{Resource: resource, Outcome: NotInstalled})
				return nil
			case apierrors.IsForbidden(err):
				res.Sources = append(res.Sources, Source{Resource: resource, Outcome: Refused, Err: err})
				return nil
			case err != nil:
				return fmt.Errorf("list %s: %w", resource, err)
			}
			for _, o := range scan() {
				res.Summaries = append(res.Summaries, ticketkeys.Scan(o))
			}
			if cont = l.GetContinue(); cont == "" {
				res.Sources = append(res.Sources, Source{Resource: resource, Outcome: Done})
				return nil
			}
		}
	}

	cms := &corev1.ConfigMapList{}
	if err := list("configmaps", cms, func() []ticketkeys.Object {
		out := make([]ticketkeys.Object, len(cms.Items))
		for i := range cms.Items {
			out[i] = ticketkeys.FromConfigMap(&cms.Items[i])
		}
		return out
	}); err != nil {
		return res, err
	}
	var notTypes []fields.Selector
	for _, t := range secretsWithoutKeys {
		notTypes = append(notTypes, fields.OneTermNotEqualSelector("type", t))
	}
	secrets := &corev1.SecretList{}
	if err := list("secrets", secrets, func() []ticketkeys.Object {
		out := make([]ticketkeys.Object, len(secrets.Items))
		for i := range secrets.Items {
			out[i] = ticketkeys.FromSecret(&secrets.Items[i])
			secrets.Items[i].Data = nil
		}
		return out
	}, client.MatchingFieldsSelector{Selector: fields.AndSelectors(notTypes...)}); err != nil {
		return res, err
	}
	for _, k := range kinds {
		m, err := mapper.RESTMapping(k.gk)
		resource := strings.ToLower(k.gk.Kind) + "s." + k.gk.Group
		if m != nil {
			resource = m.Resource.GroupResource().String()
		}
		switch {
		case meta.IsNoMatchError(err):
			res.Sources = append(res.Sources, Source{Resource: resource, Outcome: NotInstalled})
			continue
		case err != nil:
			return res, fmt.Errorf("discover %s: %w", resource, err)
		case k.cluster && namespace != "":
			res.Sources = append(res.Sources, Source{Resource: resource, Outcome: Skipped})
			continue
		}
		l := &unstructured.UnstructuredList{}
		l.SetGroupVersionKind(m.GroupVersionKind.GroupVersion().WithKind(k.gk.Kind + "List"))
		if err := list(resource, l, func() []ticketkeys.Object {
			out := make([]ticketkeys.Object, len(l.Items))
			for i := range l.Items {
				l.Items[i].SetGroupVersionKind(m.GroupVersionKind)
				out[i] = ticketkeys.FromUnstructured(&l.Items[i])
			}
			return out
		}); err != nil {
			return res, err
		}
	}
	return res, nil
}

package plugin

import (
	"context"
	"errors"
	"fmt"
	"strings"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/cmd/kubectl-ringmaster/internal/audit"
)

// fieldManager names the plugin's writes in managedFields.
const fieldManager = "kubectl-ringmaster"

// kube reaches the cluster of the user's kubeconfig, as the user.
type kube struct {
	flags *genericclioptions.ConfigFlags

	client client.Client
	core   kubernetes.Interface
}

// apiScheme holds the kinds the plugin reads: Kubernetes', ringmaster's and
// cert-manager's.
var apiScheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	b := runtime.NewSchemeBuilder(clientgoscheme.AddToScheme, v1alpha1.AddToScheme, cmapi.AddToScheme)
	if err := b.AddToScheme(s); err != nil {
		panic(err) // the schemes are fixed at build time
	}
	return s
}()

// connect builds the clients once, from the kubeconfig flags.
func (k *kube) connect() error {
	if k.client != nil {
		return nil
	}
	cfg, err := k.flags.ToRESTConfig()
	if err != nil {
		return err
	}
	cfg.UserAgent = fieldManager
	if k.client, err = client.New(cfg, client.Options{Scheme: apiScheme}); err != nil {
		return err
	}
	k.core, err = kubernetes.NewForConfig(cfg)
	return err
}

// namespace is --namespace, or the kubeconfig context's.
func (k *kube) namespace() (string, error) {
	ns, _, err := k.flags.ToRawKubeConfigLoader().Namespace()
	return ns, err
}

// refused reports whether err is the API server refusing the user.
func refused(err error) bool {
	return apierrors.IsForbidden(err)
}

// notServed reports whether the API of err's request is not installed.
func notServed(err error) bool {
	return meta.IsNoMatchError(err)
}

// ringRef names a TicketKeyRing (with its namespace) or a
// ClusterTicketKeyRing.
type ringRef struct {
	Cluster bool
	// ECH names an ECHKeyRing (ekr/NAME), which only status shows.
	ECH       bool
	Namespace string
	Name      string
}

func (r ringRef) String() string {
	if r.ECH {
		return v1alpha1.KindECHKeyRing + " " + r.Namespace + "/" + r.Name
	}
	if r.Cluster {
		return audit.KindClusterTicketKeyRing + " " + r.Name
	}
	return audit.KindTicketKeyRing + " " + r.Namespace + "/" + r.Name
}

// parseRing reads a ring argument as kubectl reads TYPE/NAME: NAME or
// tkr/NAME is a TicketKeyRing of the namespace, ctkr/NAME a
// ClusterTicketKeyRing; the types' long names (ticketkeyring,
// clusterticketkeyrings.ringmaster.io, ...) do too. (--cluster is kubectl's
// flag naming a kubeconfig cluster, so it cannot name a cluster ring.)
func parseRing(arg, namespace string) (ringRef, error) {
	typ, name, typed := strings.Cut(arg, "/")
	if !typed {
		name, typ = typ, ""
	}
	if name == "" || strings.Contains(name, "/") {
		return ringRef{}, fmt.Errorf("%q is not a ring: want NAME, tkr/NAME or ctkr/NAME", arg)
	}
	cluster := false
	switch strings.TrimSuffix(strings.ToLower(typ), ".ringmaster.io") {
	case "ekr", "echkeyring", "echkeyrings":
		return ringRef{ECH: true, Namespace: namespace, Name: name}, nil
	case "", "tkr", "ticketkeyring", "ticketkeyrings":
	case "ctkr", "clusterticketkeyring", "clusterticketkeyrings":
		cluster = true
	default:
		return ringRef{}, fmt.Errorf("%q is not a ring: want NAME, tkr/NAME or ctkr/NAME", arg)
	}
	if cluster {
		return ringRef{Cluster: true, Name: name}, nil
	}
	return ringRef{Namespace: namespace, Name: name}, nil
}

// ring connects and reads a ring argument in the namespace of the flags or
// the kubeconfig.
func (k *kube) ring(arg string) (ringRef, error) {
	if err := k.connect(); err != nil {
		return ringRef{}, err
	}
	ns, err := k.namespace()
	if err != nil {
		return ringRef{}, err
	}
	return parseRing(arg, ns)
}

// getRing reads a ring. Its errors say which ring, and what the user may
// not do.
func (k *kube) getRing(ctx context.Context, ref ringRef) (client.Object, audit.Ring, error) {
	key := types.NamespacedName{Namespace: ref.Namespace, Name: ref.Name}
	var obj client.Object
	var ring audit.Ring
	var err error
	if ref.ECH {
		return nil, ring, fmt.Errorf("%s: ECH rings rotate on their schedule, gated on their fleet and DNS; only status and audit show them", ref)
	}
	if ref.Cluster {
		r := &v1alpha1.ClusterTicketKeyRing{}
		err = k.client.Get(ctx, key, r)
		obj, ring = r, audit.FromClusterTicketKeyRing(r)
	} else {
		r := &v1alpha1.TicketKeyRing{}
		err = k.client.Get(ctx, key, r)
		obj, ring = r, audit.FromTicketKeyRing(r)
	}
	if err == nil {
		return obj, ring, nil
	}
	if apierrors.IsNotFound(err) && !ref.Cluster {
		return nil, ring, fmt.Errorf("%s not found (a ClusterTicketKeyRing is named ctkr/NAME, an ECHKeyRing ekr/NAME)", ref)
	}
	return nil, ring, readError(ref, err)
}

// readError says which ring could not be read, and why.
func readError(ref ringRef, err error) error {
	switch {
	case apierrors.IsNotFound(err):
		return fmt.Errorf("%s not found", ref)
	case notServed(err):
		return fmt.Errorf("read %s: ringmaster's CRDs are not installed in this cluster: %w", ref, err)
	case refused(err):
		return fmt.Errorf("you may not read %s: %w", ref, err)
	}
	return fmt.Errorf("read %s: %w", ref, err)
}

// errRefused wraps what the API server refused with the rights that would
// allow it.
func errRefused(action string, ref ringRef, err error) error {
	role := "the ringmaster-ring-editor ClusterRole, bound in namespace " + ref.Namespace
	if ref.Cluster {
		role = "a role that may patch clusterticketkeyrings.ringmaster.io (cluster administrators)"
	}
	return errors.Join(fmt.Errorf("you may not %s %s: %w", action, ref, err),
		fmt.Errorf("it takes %s (docs/security.md, Tenancy)", role))
}

// Command ringmaster-check is the chart's `helm test`: run in the release's
// namespace with the test's service account, it proves that the installed
// operator works. It creates a TicketKeyRing, waits until the operator has
// published it (Ready, and a projection Secret holding a valid
// ticketkeys.json), deletes it, and exits 0; or exits 1 saying what it waited
// for. It prints key ids, never key bytes.
//
// It ships in the operator's image, so that `helm test` exercises the image
// that was installed.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/rand"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/keyring"
	"github.com/ringmaster-io/ringmaster/internal/version"
)

func main() {
	ns := flag.String("namespace", os.Getenv("POD_NAMESPACE"), "namespace of the test ring (default $POD_NAMESPACE)")
	name := flag.String("name", "", "name of the test ring, which the test's Role names (default ringmaster-check-<random>)")
	timeout := flag.Duration("timeout", 2*time.Minute, "how long to wait for the operator")
	printVersion := flag.Bool("version", false, "print the version and exit")
	flag.Parse()
	if *printVersion {
		fmt.Println(version.String("ringmaster-check"))
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	if *name == "" {
		*name = "ringmaster-check-" + rand.String(5)
	}
	if err := run(ctx, *ns, *name); err != nil {
		fmt.Fprintln(os.Stderr, "ringmaster-check: FAIL:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, ns, name string) (err error) {
	if ns == "" {
		return errors.New("no namespace: set -namespace or POD_NAMESPACE")
	}
	scheme := runtime.NewScheme()
	if err := errors.Join(clientgoscheme.AddToScheme(scheme), v1alpha1.AddToScheme(scheme)); err != nil {
		return err
	}
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return err
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return err
	}

	ring := &v1alpha1.TicketKeyRing{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1alpha1.TicketKeyRingSpec{
			RotationInterval: metav1.Duration{Duration: time.Hour},
			ActivationDelay:  metav1.Duration{Duration: time.Minute},
			RetainedKeys:     1,
		},
	}
	if err := create(ctx, c, ring); err != nil {
		return err
	}
	fmt.Printf("Created TicketKeyRing %s/%s\n", ns, ring.Name)
	defer func() {
		// The ring owns its Secrets: deleting it deletes them.
		del, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		err = errors.Join(err, client.IgnoreNotFound(c.Delete(del, ring)))
	}()

	var last string
	for {
		done, what, err := published(ctx, c, ring)
		if err != nil {
			return err
		}
		if done {
			fmt.Println(what)
			fmt.Println("PASS: the operator published the ring")
			return nil
		}
		if what != last {
			fmt.Println("Waiting:", what)
			last = what
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the operator did not publish TicketKeyRing %s/%s: %s", ns, ring.Name, what)
		case <-time.After(time.Second):
		}
	}
}

// create creates ring. One of the same name is a killed run's, which the
// test's Role lets it delete: it goes first, with the Secrets it owns.
func create(ctx context.Context, c client.Client, ring *v1alpha1.TicketKeyRing) error {
	for {
		err := c.Create(ctx, ring.DeepCopy())
		if !apierrors.IsAlreadyExists(err) {
			if err != nil {
				return fmt.Errorf("create TicketKeyRing %s/%s: %w", ring.Namespace, ring.Name, err)
			}
			return nil
		}
		fmt.Printf("Deleting TicketKeyRing %s/%s, left by an earlier run\n", ring.Namespace, ring.Name)
		if err := c.Delete(ctx, ring.DeepCopy()); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("delete the earlier TicketKeyRing %s/%s: %w", ring.Namespace, ring.Name, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the earlier TicketKeyRing %s/%s is not gone: %w", ring.Namespace, ring.Name, ctx.Err())
		case <-time.After(time.Second):
		}
	}
}

// published reports whether the operator has published the ring, and what
// it saw.
func published(ctx context.Context, c client.Client, ring *v1alpha1.TicketKeyRing) (bool, string, error) {
	key := client.ObjectKeyFromObject(ring)
	if err := c.Get(ctx, key, ring); err != nil {
		return false, "", fmt.Errorf("get TicketKeyRing %s: %w", key, err)
	}
	cond := apimeta.FindStatusCondition(ring.Status.Conditions, v1alpha1.ConditionReady)
	if cond == nil || cond.Status != metav1.ConditionTrue || ring.Status.ActiveKey == nil {
		return false, fmt.Sprintf("TicketKeyRing %s to be Ready (condition %v)", key, cond), nil
	}
	secret := &corev1.Secret{}
	name := types.NamespacedName{Namespace: ring.Namespace, Name: ring.ProjectionSecretName()}
	if err := c.Get(ctx, name, secret); err != nil {
		return false, fmt.Sprintf("Secret %s (%v)", name, err), nil
	}
	r, err := keyring.Decode(secret.Data[keyring.FileName])
	if err != nil {
		return false, "", fmt.Errorf("secret %s: %w", name, err)
	}
	if r.Epoch != ring.Status.Epoch {
		return false, fmt.Sprintf("Secret %s to hold epoch %d (holds %d)", name, ring.Status.Epoch, r.Epoch), nil
	}
	return true, fmt.Sprintf("TicketKeyRing %s is Ready at epoch %d, active key %s; Secret %s holds %s with %d keys",
		key, ring.Status.Epoch, ring.Status.ActiveKey.ID, name, keyring.FileName, len(r.Keys)), nil
}

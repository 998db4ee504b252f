package fleet

import (
	"context"
	"crypto/rand"
	"fmt"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/keyring"
)

// UnstagedPublisher shares one key ring across a fleet without staging, the
// way Caddy and rpaas-operator rotate: each new key encrypts from the moment
// it is published, so a replica that receives it late cannot decrypt the
// tickets its faster peers already issue with it. It writes the ring into a
// Secret through the API server, in ringmaster's ticketkeys.json format, so
// that the same projection syncer delivers it with the same delays; only
// the schedule differs from ringmaster's.
type UnstagedPublisher struct {
	c        *Cluster
	ns, name string
	keep     int
	ring     keyring.Ring
}

// NewUnstagedPublisher returns a publisher of Secret ns/name that keeps the
// keep newest keys (the encrypting one and keep-1 decrypt-only ones).
func NewUnstagedPublisher(c *Cluster, ns, name string, keep int) *UnstagedPublisher {
	return &UnstagedPublisher{c: c, ns: ns, name: name, keep: keep, ring: keyring.Ring{Name: ns + "/" + name}}
}

// Rotate mints a key that encrypts at once, retires the previous one, and
// writes the new epoch. It returns the new key's id.
func (p *UnstagedPublisher) Rotate(ctx context.Context) (string, error) {
	var s keyring.Secret
	_, _ = rand.Read(s[:]) // never fails (crypto/rand)
	now := time.Now()
	const lifetime = time.Hour // far beyond any run: nothing expires here
	k := keyring.NewKey(s)
	k.ActiveFrom, k.RetireAt, k.ExpiresAt = now, now.Add(lifetime), now.Add(2*lifetime)
	keys := []keyring.Key{k}
	for _, old := range p.ring.Keys {
		if len(keys) == p.keep {
			break
		}
		old.RetireAt = keys[len(keys)-1].ActiveFrom
		old.ExpiresAt = old.RetireAt.Add(lifetime)
		keys = append(keys, old)
	}
	next := keyring.Ring{Name: p.ring.Name, Epoch: p.ring.Epoch + 1, IssuedAt: now, Keys: keys}
	data, err := keyring.Encode(next)
	if err != nil {
		return "", err
	}
	sec := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: p.ns, Name: p.name,
			Annotations: map[string]string{v1alpha1.EpochAnnotation: strconv.FormatInt(next.Epoch, 10)},
		},
		Data: map[string][]byte{keyring.FileName: data},
	}
	if next.Epoch == 1 {
		if err := p.c.CreateNamespace(ctx, p.ns); err != nil {
			return "", err
		}
		err = p.c.Client.Create(ctx, sec)
		if apierrors.IsAlreadyExists(err) {
			err = p.c.Client.Update(ctx, sec)
		}
	} else {
		err = p.c.Client.Update(ctx, sec)
	}
	if err != nil {
		return "", fmt.Errorf("write %s/%s epoch %d: %w", p.ns, p.name, next.Epoch, err)
	}
	p.ring = next
	return k.ID, nil
}

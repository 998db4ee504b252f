package fleet

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// AddCluster starts another control plane and operator beside e's, for
// tests of rings shared across clusters: the peer shares e's binaries,
// supervisor and PKI (so that its replicas serve the same certificate), and
// e's Close stops its fleets and processes too. name names its work
// directory.
func (e *Env) AddCluster(ctx context.Context, name string) (*Env, error) {
	work := filepath.Join(e.Work, name)
	if err := os.MkdirAll(work, 0o700); err != nil {
		return nil, err
	}
	peer := &Env{Work: work, Bins: e.Bins, Sup: e.Sup, PKI: e.PKI, keep: true}
	var err error
	if peer.Cluster, err = StartCluster(ctx, e.Sup, e.Bins, work); err != nil {
		return nil, fmt.Errorf("cluster %s: %w", name, err)
	}
	if peer.Operator, err = peer.Cluster.StartOperator(ctx, e.Sup, e.Bins, false); err != nil {
		return nil, fmt.Errorf("cluster %s: %w", name, err)
	}
	peer.logs = append(peer.logs, peer.Operator.Log)
	e.mu.Lock()
	e.peers = append(e.peers, peer)
	e.mu.Unlock()
	return peer, nil
}

// RestartOperator kills the operator, as a crashed pod would die, and
// starts it again.
func (e *Env) RestartOperator(ctx context.Context) error {
	if err := e.KillOperator(); err != nil {
		return err
	}
	return e.StartOperator(ctx)
}

// KillOperator kills the operator with SIGKILL and waits for it to exit.
func (e *Env) KillOperator() error {
	if err := e.Operator.Kill(); err != nil {
		return fmt.Errorf("kill the operator: %w", err)
	}
	return nil
}

// StartOperator starts the operator again after KillOperator.
func (e *Env) StartOperator(ctx context.Context) error {
	if exited, _ := e.Operator.Exited(); !exited {
		return errors.New("the operator still runs")
	}
	p, err := e.Cluster.StartOperator(ctx, e.Sup, e.Bins, false)
	if err != nil {
		return err
	}
	e.Operator = p
	e.logs = append(e.logs, p.Log)
	return nil
}

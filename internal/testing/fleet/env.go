// Package fleet is the end-to-end harness of ringmaster: a real control plane
// (etcd and kube-apiserver), the operator binary, and fleets of
// examples/server replicas fed by a stand-in for the kubelet, behind a
// round-robin load balancer, under a load of reconnecting TLS clients.
//
// It is test and benchmark support, imported by no part of the operator:
// the suites of test/ (e2e, multicluster, requests, cluster) and the
// sidecar's and the plugin's tests assert with it, and the commands of
// hack/ run make demo, make bench-fleet, make soak, make bench-attack and
// make bench-scale with it. Every process it starts is ended by its own pid
// (see Supervisor), and everything it listens on is on loopback.
package fleet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/ringmaster-io/ringmaster/internal/testing/apiaudit"
)

// Options configure an Env.
type Options struct {
	// KeyType is the replicas' certificate key; ECDSA P-256 by default.
	KeyType KeyType
	// LeaderElect runs the operator with leader election, as deployed.
	LeaderElect bool
	// KeepWork keeps the work directory (logs, volumes) after Close.
	KeepWork bool
	// Progress, if set, receives one line per step of Setup.
	Progress io.Writer
	// PIDFile, if set, receives from Close the pid and name of every
	// process the environment started or saw started, one a line, so that
	// a caller can check with ps that none is left.
	PIDFile string
	// Shipped builds the binaries as the images' are built (see Build).
	Shipped bool
	// AsServiceAccount runs the operator as its own service account with
	// config/rbac's roles (Cluster.UseServiceAccount), as deployed,
	// rather than as admin.
	AsServiceAccount bool
	// Audit has kube-apiserver record every request of the operator's
	// service account in an audit log, Env.AuditLog (internal/testing/apiaudit).
	// It needs AsServiceAccount: the harness acts as admin, and is not
	// recorded.
	Audit bool
	// OperatorArgs and OperatorEnv go to the operator's command line and
	// environment (Cluster.OperatorArgs, Cluster.OperatorEnv).
	OperatorArgs, OperatorEnv []string
}

// Env is a running control plane and operator, ready for fleets.
type Env struct {
	// Work holds the binaries, logs, kubeconfig and replica volumes.
	Work     string
	Bins     Binaries
	Sup      *Supervisor
	Cluster  *Cluster
	Operator *Proc
	PKI      *PKI
	// AuditLog is kube-apiserver's audit log of the operator's requests,
	// with Options.Audit; empty otherwise.
	AuditLog string

	keep    bool
	pidFile string

	mu     sync.Mutex
	fleets []*Fleet
	// peers are the clusters AddCluster started beside this one.
	peers []*Env
	// logs are the logs of every operator started for this cluster, the
	// current one last.
	logs []string
}

// OperatorLogs returns the logs of every operator process started for the
// cluster, a restarted operator's too, the current one last.
func (e *Env) OperatorLogs() []string { return slices.Clone(e.logs) }

// Setup builds the binaries, starts the control plane, installs the CRDs and
// starts the operator. On failure it stops whatever it had started.
func Setup(ctx context.Context, opts Options) (env *Env, err error) {
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		return nil, errors.New("KUBEBUILDER_ASSETS is unset: run through make (make test, make test-e2e, make demo or make bench-fleet), which builds kube-apiserver, etcd and kubectl and sets it")
	}
	work, err := os.MkdirTemp("", "ringmaster-fleet-")
	if err != nil {
		return nil, err
	}
	e := &Env{Work: work, Sup: NewSupervisor(work), keep: opts.KeepWork, pidFile: opts.PIDFile}
	defer func() {
		if err != nil {
			err = errors.Join(err, e.Close())
		}
	}()
	say := func(format string, args ...any) {
		if opts.Progress != nil {
			fmt.Fprintf(opts.Progress, format+"\n", args...)
		}
	}
	if e.PKI, err = NewPKI(opts.KeyType); err != nil {
		return nil, err
	}
	if opts.Audit && !opts.AsServiceAccount {
		return nil, errors.New("an audit of the operator's requests needs it to run as its service account (Options.AsServiceAccount)")
	}
	how := ""
	if opts.Shipped {
		how = " as the images' are built (static, trimmed, stripped)"
	}
	say("Building the operator, examples/server, hack/controlplane and ringmaster-agent into %s%s", work, how)
	if e.Bins, err = Build(ctx, work, opts.Shipped); err != nil {
		return nil, err
	}
	var cpArgs []string
	if opts.Audit {
		policy := filepath.Join(work, "audit-policy.json")
		if err := apiaudit.WritePolicy(policy, apiaudit.ServiceAccountUser(OperatorNamespace, OperatorServiceAccount)); err != nil {
			return nil, err
		}
		e.AuditLog = filepath.Join(work, "audit.log")
		cpArgs = []string{"-audit-policy", policy, "-audit-log", e.AuditLog}
	}
	say("Starting the control plane: etcd and kube-apiserver on loopback, built from source by make envtest")
	if e.Cluster, err = StartCluster(ctx, e.Sup, e.Bins, work, cpArgs...); err != nil {
		return nil, err
	}
	say("Installed the CRDs of config/crd/bases")
	if opts.AsServiceAccount {
		if err := e.Cluster.UseServiceAccount(ctx, work); err != nil {
			return nil, err
		}
		say("The operator runs as service account %s/%s with config/rbac's roles", OperatorNamespace, OperatorServiceAccount)
	}
	e.Cluster.OperatorArgs, e.Cluster.OperatorEnv = opts.OperatorArgs, opts.OperatorEnv
	if e.Operator, err = e.Cluster.StartOperator(ctx, e.Sup, e.Bins, opts.LeaderElect); err != nil {
		return nil, err
	}
	e.logs = append(e.logs, e.Operator.Log)
	say("Started the operator (pid %d, log %s)", e.Operator.PID, e.Operator.Log)
	return e, nil
}

// Close stops every process, each by its own pid, and then checks that none
// of them, nor the etcd and kube-apiserver under the control plane, is still
// running: that is an error. It removes the work directory unless asked to
// keep it.
func (e *Env) Close() error {
	// Fleets first: a syncer's open watch would hold up kube-apiserver's
	// shutdown.
	var errs []error
	e.mu.Lock()
	fleets := e.fleets
	for _, p := range e.peers {
		p.mu.Lock()
		fleets = append(fleets, p.fleets...)
		p.mu.Unlock()
	}
	e.mu.Unlock()
	for _, f := range fleets {
		errs = append(errs, f.Stop())
	}
	errs = append(errs, e.Sup.StopAll())
	if e.pidFile != "" {
		var b strings.Builder
		for _, p := range e.Sup.Tracked() {
			fmt.Fprintf(&b, "%d %s\n", p.ID, p.Name)
		}
		errs = append(errs, os.WriteFile(e.pidFile, []byte(b.String()), 0o644))
	}
	if left := e.Sup.Leftovers(); len(left) > 0 {
		names := make([]string, len(left))
		for i, p := range left {
			names[i] = p.String()
		}
		errs = append(errs, fmt.Errorf("processes left running after stop: %s", strings.Join(names, ", ")))
	}
	err := errors.Join(errs...)
	if !e.keep && err == nil {
		errs = append(errs, os.RemoveAll(e.Work))
	}
	return errors.Join(errs...)
}

// OperatorAlive returns an error when the operator process has exited, with
// the end of its log.
func (e *Env) OperatorAlive() error {
	if exited, err := e.Operator.Exited(); exited {
		return fmt.Errorf("the operator exited (%v):\n%s", err, e.Operator.LogTail(30)) //nolint:errorlint // err is nil for exit 0: shown, not wrapped
	}
	return nil
}

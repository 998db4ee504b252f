package testenv

import (
	"context"
	"errors"
	"io"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/ringmaster-io/ringmaster/internal/operator"
)

// SuiteOptions say how StartSuite sets up a suite.
type SuiteOptions struct {
	// Env is how the control plane runs.
	Env Options
	// Log, if set, receives every log line of the process (the operator's
	// among them), in controller-runtime's development format: a suite
	// passes GinkgoWriter, or a writer that also keeps the lines to check
	// them afterwards.
	Log io.Writer
	// Operator is how the operator is built. StartSuite fills in what every
	// suite runs it with: no metrics or probe listener, the operator's
	// namespace and service account, and a fresh Registry at each start.
	Operator operator.Options
	// NoLeaderElection runs the operator without leader election; by
	// default it elects itself leader, as deployed.
	NoLeaderElection bool
	// DeferOperator leaves the operator stopped: the suite starts it with
	// StartOperator once it has set up what must run first.
	DeferOperator bool
}

// Suite is the control plane of an envtest suite and the operator running
// against it as its own service account with the generated RBAC.
type Suite struct {
	*Env
	// OperatorConfig authenticates as the operator's service account.
	OperatorConfig *rest.Config
	// Operator is the running operator, and Registry its metrics; both
	// change at each StartOperator.
	Operator *operator.Operator
	Registry *prometheus.Registry

	opts   operator.Options
	stopOp func() error
}

// StartSuite starts the control plane, sets up the operator's service
// account and RBAC, and starts the operator (unless o.DeferOperator). Stop
// ends both, whatever went wrong in between: pass it to DeferCleanup.
func StartSuite(ctx context.Context, o SuiteOptions) (*Suite, error) {
	if o.Log != nil {
		logf.SetLogger(zap.New(zap.WriteTo(o.Log), zap.UseDevMode(true)))
	}
	env, err := StartWith(o.Env)
	if err != nil {
		return nil, err
	}
	s := &Suite{Env: env, opts: o.Operator}
	s.opts.MetricsAddr, s.opts.ProbeAddr = "0", "0"
	s.opts.LeaderElection = !o.NoLeaderElection
	s.opts.Namespace, s.opts.ServiceAccount = Namespace, ServiceAccount
	if s.OperatorConfig, err = env.OperatorConfig(ctx); err != nil {
		return nil, errors.Join(err, s.Stop())
	}
	if !o.DeferOperator {
		if err := s.StartOperator(); err != nil {
			return nil, errors.Join(err, s.Stop())
		}
	}
	return s, nil
}

// Admin is a client that acts as a cluster admin, for the specs.
func (s *Suite) Admin() client.Client { return s.Client }

// StartOperator starts the operator, as its own service account, and waits
// until it leads (or runs). Called again after StopOperator, it is an
// operator restart: nothing carries over in memory, and the stopped one
// released its Lease.
func (s *Suite) StartOperator() error {
	if s.stopOp != nil {
		return errors.New("the operator is running already")
	}
	s.Registry = prometheus.NewRegistry()
	o := s.opts
	o.Registry = s.Registry
	op, stop, err := RunOperator(s.OperatorConfig, o)
	if err != nil {
		return err
	}
	s.Operator, s.stopOp = op, stop
	return nil
}

// StopOperator stops the operator and returns the error it returned, if
// any. It does nothing when the operator is not running.
func (s *Suite) StopOperator() error {
	if s.stopOp == nil {
		return nil
	}
	stop := s.stopOp
	s.stopOp = nil
	return stop()
}

// Stop stops the operator, if it runs, and the control plane.
func (s *Suite) Stop() error { return errors.Join(s.StopOperator(), s.Env.Stop()) }

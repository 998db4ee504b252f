package testenv

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest/komega"

	"github.com/ringmaster-io/ringmaster/internal/operator"
)

// RunOperator builds the operator as main.go does, with o, starts it, and
// waits until it leads (or, without leader election, until it runs). stop
// ends it and waits for it to return; the error it returned, if any, is
// reported by stop.
func RunOperator(cfg *rest.Config, o operator.Options) (op *operator.Operator, stop func() error, err error) {
	ctx, cancel := context.WithCancel(context.Background())
	op, err = operator.New(ctx, cfg, o)
	if err != nil {
		cancel()
		return nil, nil, err
	}
	done := make(chan error, 1)
	go func() { done <- op.Start(ctx) }()
	stop = func() error { cancel(); return <-done }
	select {
	case <-op.Elected():
		return op, stop, nil
	case err := <-done:
		cancel()
		return nil, nil, fmt.Errorf("the operator stopped at start: %w", err)
	case <-time.After(time.Minute):
		return nil, nil, fmt.Errorf("the operator did not lead within a minute: %w", stop())
	}
}

// Metric reads the value of the first series of a gauge or counter whose
// labels include the given ones; ok is false when there is none.
func Metric(g prometheus.Gatherer, name string, labels map[string]string) (value float64, ok bool, err error) {
	series, err := matching(g, name, labels)
	if err != nil || len(series) == 0 {
		return 0, false, err
	}
	m := series[0]
	if m.Counter != nil {
		return m.GetCounter().GetValue(), true, nil
	}
	return m.GetGauge().GetValue(), true, nil
}

// Series counts the series of a metric whose labels include the given ones.
func Series(g prometheus.Gatherer, name string, labels map[string]string) (int, error) {
	series, err := matching(g, name, labels)
	return len(series), err
}

func matching(g prometheus.Gatherer, name string, labels map[string]string) ([]*dto.Metric, error) {
	families, err := g.Gather()
	if err != nil {
		return nil, err
	}
	var out []*dto.Metric
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	series:
		for _, m := range f.GetMetric() {
			have := map[string]string{}
			for _, l := range m.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			for k, v := range labels {
				if have[k] != v {
					continue series
				}
			}
			out = append(out, m)
		}
	}
	return out, nil
}

// Update reads obj afresh, applies mutate and writes it back (komega's
// Update), again after a conflict: a spec's change to an object the
// operator writes too. obj's annotations are never nil in mutate.
func Update[T client.Object](ctx context.Context, c client.Client, obj T, mutate func(T)) error {
	return retry.RetryOnConflict(retry.DefaultRetry, komega.New(c).WithContext(ctx).Update(obj, func() {
		if obj.GetAnnotations() == nil {
			obj.SetAnnotations(map[string]string{})
		}
		mutate(obj)
	}))
}

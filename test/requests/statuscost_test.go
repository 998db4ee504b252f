//go:build integration

package requests_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/controller/apply"
	"github.com/ringmaster-io/ringmaster/internal/testing/fleet"
	"github.com/ringmaster-io/ringmaster/internal/testing/testenv"
)

// BenchmarkStatusWrite measures what the control plane pays (kube-apiserver
// and etcd processor time, from /proc) for a ring's status write of a
// rotation, two ways: the operator's server-side apply of the whole status
// (apply.Status), and a JSON merge patch of only the fields a rotation
// changes. Each op writes one ring's status once; the rings carry a
// rotation's full status beforehand. Run it with
//
//	KUBEBUILDER_ASSETS="$(hack/envtest.sh)" go test -tags integration ./test/requests/ -run '^$' -bench StatusWrite -benchtime 400x
func BenchmarkStatusWrite(b *testing.B) {
	ctx := b.Context()
	env, err := testenv.Start()
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = env.Stop() })
	cpu := controlPlaneCPU(b, env)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "cost-"}}
	if err := env.Client.Create(ctx, ns); err != nil {
		b.Fatal(err)
	}
	made := 0
	for _, variant := range []struct {
		name  string
		write func(ctx context.Context, r *v1alpha1.TicketKeyRing, next v1alpha1.TicketKeyRingStatus) error
	}{
		{"apply-whole-status", func(ctx context.Context, r *v1alpha1.TicketKeyRing, next v1alpha1.TicketKeyRingStatus) error {
			return apply.Status(ctx, env.Client, r, r.Status, next)
		}},
		{"merge-patch-changed-fields", func(ctx context.Context, r *v1alpha1.TicketKeyRing, next v1alpha1.TicketKeyRingStatus) error {
			patch, err := json.Marshal(map[string]any{"status": map[string]any{"epoch": next.Epoch, "snapshot": next.Snapshot, "activeKey": next.ActiveKey,
				"nextRotation": next.NextRotation, "keys": next.Keys, "conditions": next.Conditions, "fleetRequest": next.FleetRequest}})
			if err != nil {
				return err
			}
			return env.Client.Status().Patch(ctx, r, client.RawPatch(types.MergePatchType, patch), client.FieldOwner(apply.FieldOwner))
		}},
	} {
		b.Run(variant.name, func(b *testing.B) {
			rings := make([]*v1alpha1.TicketKeyRing, b.N)
			for i := range rings {
				made++
				spec := fleet.RingSpec{Namespace: ns.Name, Name: fmt.Sprintf("%s-%d", variant.name, made), RotationInterval: time.Hour, ActivationDelay: time.Minute, RetainedKeys: 3}
				r := spec.Object()
				if err := env.Client.Create(ctx, r); err != nil {
					b.Fatal(err)
				}
				if err := apply.Status(ctx, env.Client, r, v1alpha1.TicketKeyRingStatus{}, rotated(1)); err != nil {
					b.Fatal(err)
				}
				if err := env.Client.Get(ctx, client.ObjectKeyFromObject(r), r); err != nil {
					b.Fatal(err)
				}
				rings[i] = r
			}
			before := cpu()
			b.ResetTimer()
			for i := range b.N {
				if err := variant.write(ctx, rings[i], rotated(2)); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			spent := cpu() - before
			b.ReportMetric(float64(spent.Microseconds())/1000/float64(b.N), "cp-ms/op")
			got := &v1alpha1.TicketKeyRing{}
			if err := env.Client.Get(ctx, client.ObjectKeyFromObject(rings[0]), got); err != nil || got.Status.Epoch != 2 {
				b.Fatalf("the write did not take: epoch %d, %v", got.Status.Epoch, err)
			}
		})
	}
}

// rotated is a ring's status after the rotation that published epoch, with
// the fields the operator sets.
func rotated(epoch int64) v1alpha1.TicketKeyRingStatus {
	at := metav1.NewTime(time.Now().Truncate(time.Second))
	cond := func(t string, s metav1.ConditionStatus, reason, msg string) metav1.Condition {
		return metav1.Condition{Type: t, Status: s, Reason: reason, Message: msg, ObservedGeneration: 1, LastTransitionTime: at}
	}
	st := v1alpha1.TicketKeyRingStatus{
		Conditions: []metav1.Condition{
			cond(v1alpha1.ConditionRotationOverdue, metav1.ConditionFalse, v1alpha1.ReasonOnSchedule, "No rotation is overdue"),
			cond(v1alpha1.ConditionRetentionLimited, metav1.ConditionFalse, "FormatsKeepRetainedKeys", "Every format listed keeps the 3 retained key(s)"),
			cond(v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonPublished, fmt.Sprintf("Epoch %d is published to 1 namespace(s)", epoch)),
		},
		Epoch: epoch, Snapshot: fmt.Sprintf("web-e%d", epoch), Targets: 1,
		ActiveKey:    &v1alpha1.ActiveKey{ID: fmt.Sprintf("a%07d", epoch), ActiveFrom: at},
		NextRotation: &metav1.Time{Time: at.Add(time.Hour)},
		FleetRequest: &v1alpha1.FleetRequestRecord{Name: "incident", UID: "0b0f6b9e-0000-4000-8000-000000000000", CreatedAt: at, Action: v1alpha1.FleetRotate, Epoch: epoch, ServedAt: &at},
	}
	for i := range 5 {
		id := fmt.Sprintf("k%03d%04d", epoch, i)
		st.Keys = append(st.Keys, v1alpha1.KeyStatus{ID: id, State: v1alpha1.KeyState("decrypt-only"), ActiveFrom: at, RetireAt: at, ExpiresAt: at})
	}
	return st
}

// controlPlaneCPU returns a function reading the processor time that
// env's kube-apiserver and etcd have used so far, found by the ports they
// serve on.
func controlPlaneCPU(b *testing.B, env *testenv.Env) func() time.Duration {
	api, err := url.Parse(env.Config.Host)
	if err != nil {
		b.Fatal(err)
	}
	etcd, err := url.Parse(env.EtcdURL())
	if err != nil {
		b.Fatal(err)
	}
	var pids []int
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		cmd, err := os.ReadFile(filepath.Join(d, "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(string(cmd), "\x00")
		for _, a := range args {
			if a == "--secure-port="+api.Port() || a == "--listen-client-urls="+etcd.String() || a == "--listen-client-urls=http://"+etcd.Host {
				pid, _ := strconv.Atoi(filepath.Base(d))
				pids = append(pids, pid)
				break
			}
		}
	}
	if len(pids) != 2 {
		b.Fatalf("found %d of kube-apiserver and etcd (pids %v)", len(pids), pids)
	}
	return func() time.Duration {
		var sum time.Duration
		for _, pid := range pids {
			stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
			if err != nil {
				b.Fatal(err)
			}
			f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+2:]))
			for _, v := range f[11:13] { // utime, stime
				n, _ := strconv.ParseUint(v, 10, 64)
				sum += time.Duration(n) * 10 * time.Millisecond
			}
		}
		return sum
	}
}

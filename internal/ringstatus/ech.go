package ringstatus

import (
	"encoding/base64"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/echring"
	"github.com/ringmaster-io/ringmaster/internal/textlimit"
)

// ECHOutcome is what one reconcile of an ECHKeyRing found and did.
type ECHOutcome struct {
	Now        time.Time
	Generation int64
	Policy     echring.Policy
	// Ring is the newest ring, Snapshot its snapshot Secret's name.
	Ring     echring.Ring
	Snapshot string
	// Plan is the lifecycle's pass.
	Plan echring.Plan
	// Want is what the record must hold now.
	Want []echring.Config
	// Problem keeps Ready False, with its reason; Halted says the pass
	// stopped before it planned: the rest of the status stands.
	Problem *Problem
	Halted  bool
	// DNSHolds says DNS answers Want, seen at DNSAt; DNSProblem says what
	// went wrong with it, in words a tenant may read.
	DNSHolds   bool
	DNSAt      time.Time
	DNSProblem string
	// Seen is what the pods report of the staged config; Overdue says it
	// waits for them past spec.confirmation.timeout.
	Seen    *v1alpha1.ConfirmationStatus
	Overdue bool
	// Record is status.dnsRecord after the pass.
	Record *v1alpha1.ECHDNSRecord
	// Recorded is the published config its snapshot records as published
	// unconfirmed, and LastSeen what the status last showed of the pods:
	// they say so until the next config is published or overdue, whatever
	// the status read.
	Recorded *uint8
	LastSeen *v1alpha1.ConfirmationStatus
}

// BuildECH is an ECHKeyRing's status after a reconcile with outcome o,
// from its status before.
func BuildECH(prev v1alpha1.ECHKeyRingStatus, o ECHOutcome) (st v1alpha1.ECHKeyRingStatus) {
	defer func() { boundMessages(st.Conditions) }()
	st = *prev.DeepCopy()
	ready := metav1.Condition{Type: v1alpha1.ConditionReady, ObservedGeneration: o.Generation}
	if o.Halted {
		ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, o.Problem.Reason, o.Problem.Message
		meta.SetStatusCondition(&st.Conditions, ready)
		return st
	}
	ring := o.Ring
	if ring.Epoch > 0 {
		st.Epoch, st.Snapshot = ring.Epoch, o.Snapshot
	}
	st.Configs, st.PublishedConfig, st.NextRotation = nil, nil, nil
	for _, c := range ring.Configs {
		st.Configs = append(st.Configs, v1alpha1.ECHConfigStatus{ID: int32(c.ID), State: v1alpha1.ECHConfigState(c.State), CreatedAt: metav1.NewTime(c.CreatedAt),
			PublishedAt: timeOrNil(c.PublishedAt), RetiredAt: timeOrNil(c.RetiredAt), ExpiresAt: timeOrNil(c.ExpiresAt)})
		if c.State == echring.Published && st.PublishedConfig == nil {
			id := int32(c.ID)
			st.PublishedConfig = &id
		}
	}
	if at := echring.ReadyAt(o.Policy, ring); !at.IsZero() {
		st.NextRotation = &metav1.Time{Time: at}
	} else if at := echring.MintAt(o.Policy, ring); !at.IsZero() {
		st.NextRotation = &metav1.Time{Time: at.Add(o.Policy.DeliveryDelay)}
	}
	if o.Problem == nil {
		st.ECHConfigList = ""
		if len(o.Want) > 0 {
			st.ECHConfigList = base64.StdEncoding.EncodeToString(echring.ConfigList(o.Want))
		}
	}
	if o.DNSHolds && o.Problem == nil && o.Plan.Held != echring.HoldDNS && !o.DNSAt.IsZero() {
		st.DNSVerifiedAt = &metav1.Time{Time: o.DNSAt}
	}
	_, staged := ring.Staged()
	st.Confirmation = nil
	if staged {
		st.Confirmation = o.Seen
	}
	st.DNSRecord = o.Record

	switch {
	case o.Problem != nil:
		ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, o.Problem.Reason, o.Problem.Message
	case o.DNSProblem != "":
		ready.Status, ready.Reason = metav1.ConditionFalse, v1alpha1.ReasonDNSUnavailable
		ready.Message = fmt.Sprintf("DNS does not take or answer the ring's configs: %s. Nothing new is published and no config is destroyed before its time", o.DNSProblem)
	case st.PublishedConfig == nil:
		ready.Status, ready.Reason = metav1.ConditionFalse, v1alpha1.ReasonAwaitingDNS
		ready.Message = "No config is published yet: the first is " + heldFor(o.Plan.Held, staged)
	default:
		ready.Status, ready.Reason = metav1.ConditionTrue, v1alpha1.ReasonPublished
		ready.Message = fmt.Sprintf("Config %d is published and DNS answers it; epoch %d is delivered", *st.PublishedConfig, ring.Epoch)
		if staged {
			ready.Message += "; the next config is " + heldFor(o.Plan.Held, staged)
		}
	}
	meta.SetStatusCondition(&st.Conditions, ready)

	overdue := metav1.Condition{Type: v1alpha1.ConditionConfirmationOverdue, ObservedGeneration: o.Generation,
		Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonOnSchedule, Message: "No staged config waits for its fleet past spec.confirmation.timeout"}
	was := meta.FindStatusCondition(prev.Conditions, overdue.Type)
	switch {
	case o.Plan.Published != nil && o.Plan.Unconfirmed:
		overdue.Reason, overdue.Message = v1alpha1.ReasonPublishedUnconfirmed, PublishedUnconfirmed(*o.Plan.Published, o.Seen)
	case o.Overdue && o.Problem == nil:
		overdue.Status, overdue.Reason = metav1.ConditionTrue, v1alpha1.ReasonAwaitingPods
		overdue.Message = fmt.Sprintf("The staged config is held back past spec.confirmation.timeout; the published config keeps serving, and the staged one is published unconfirmed at its ceiling, %s, once DNS answers it.",
			echring.CeilingAt(o.Policy, ring).UTC().Format(time.RFC3339)) + missingPods(o.Seen)
	case o.Recorded != nil && !o.Overdue && o.Plan.Published == nil && (was == nil || was.Reason != v1alpha1.ReasonPublishedUnconfirmed):
		seen := o.LastSeen
		if seen != nil && seen.StagedKey != fmt.Sprint(*o.Recorded) {
			seen = nil
		}
		overdue.Reason, overdue.Message = v1alpha1.ReasonPublishedUnconfirmed, PublishedUnconfirmed(*o.Recorded, seen)
	case was != nil && was.Reason == v1alpha1.ReasonPublishedUnconfirmed && !o.Overdue && o.Plan.Published == nil:
		// Until the next config is published or overdue, the condition
		// says how the published one got there.
		overdue.Reason, overdue.Message = was.Reason, was.Message
	}
	if o.Problem == nil || meta.FindStatusCondition(st.Conditions, overdue.Type) == nil {
		meta.SetStatusCondition(&st.Conditions, overdue)
	}
	return st
}

func heldFor(h echring.Hold, staged bool) string {
	switch {
	case !staged:
		return "to be staged"
	case h == echring.HoldDelivery:
		return "staged, and waits out spec.deliveryDelay"
	case h == echring.HoldConfirmation:
		return "staged, and waits for every selected pod to hold it"
	case h == echring.HoldDNS:
		return "staged and confirmed, and waits for DNS to answer it"
	}
	return "staged"
}

// PublishedUnconfirmed says that config id was published at its ceiling,
// naming the pods that lacked it when last asked.
func PublishedUnconfirmed(id uint8, s *v1alpha1.ConfirmationStatus) string {
	return fmt.Sprintf("Config %d was published to DNS at its ceiling (spec.confirmation.maxDelay, or timeout) without every pod reporting it: a pod without it rejects ECH under it with its retry configs, and the client succeeds on retry.", id) + missingPods(s)
}

func missingPods(s *v1alpha1.ConfirmationStatus) string {
	if s == nil {
		return " The pods were not asked yet."
	}
	names := make([]string, len(s.Missing))
	for i, m := range s.Missing {
		names[i] = fmt.Sprintf("%s (%s)", m.Name, m.Reason)
	}
	msg := fmt.Sprintf(" %d of %d pods hold it; missing: %s", s.Holding, s.Pods, textlimit.List(names, textlimit.MaxListed, ", ", max(int(s.Pods-s.Holding)-len(s.Missing), 0)))
	if s.Note != "" {
		msg += ". Note: " + s.Note
	}
	return msg
}

func timeOrNil(t time.Time) *metav1.Time {
	if t.IsZero() {
		return nil
	}
	return &metav1.Time{Time: t}
}

// ECHWarnings are the Warning events an ECHKeyRing's conditions turning
// bad call for: Ready turning False (or False for a new reason), and
// ConfirmationOverdue turning True. AwaitingDNS, the first config on its
// way, is no fault.
func ECHWarnings(prev, next []metav1.Condition) (reasons, messages []string) {
	for _, typ := range []string{v1alpha1.ConditionReady, v1alpha1.ConditionConfirmationOverdue} {
		bad := metav1.ConditionFalse
		if typ == v1alpha1.ConditionConfirmationOverdue {
			bad = metav1.ConditionTrue
		}
		was, is := meta.FindStatusCondition(prev, typ), meta.FindStatusCondition(next, typ)
		if is == nil || is.Status != bad || (was != nil && was.Status == is.Status && was.Reason == is.Reason) || is.Reason == v1alpha1.ReasonAwaitingDNS {
			continue
		}
		reasons, messages = append(reasons, is.Reason), append(messages, is.Message)
	}
	return reasons, messages
}

package ech

import (
	"encoding/base64"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/echring"
	"github.com/ringmaster-io/ringmaster/internal/ringplan"
	"github.com/ringmaster-io/ringmaster/internal/textlimit"
)

// Pass is what one reconcile of an ECHKeyRing found and did.
type Pass struct {
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
	Problem *ringplan.Problem
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

// Build is an ECHKeyRing's status after a reconcile with outcome o,
// from its status before.
func Build(prev v1alpha1.ECHKeyRingStatus, o Pass) (st v1alpha1.ECHKeyRingStatus) {
	defer func() { ringplan.Settle(prev.Conditions, st.Conditions, o.Now) }()
	st = *prev.DeepCopy()
	conds := ringplan.On(&st.Conditions, o.Generation)
	if o.Halted {
		conds.Set(v1alpha1.ConditionReady, metav1.ConditionFalse, o.Problem.Reason, o.Problem.Message)
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
	status, reason, message := ready(o, st, staged, ring)
	conds.Set(v1alpha1.ConditionReady, status, reason, message)
	overdue(conds, prev, o, ring)
	return st
}

// ready is the Ready condition's status, reason and message after pass o.
func ready(o Pass, st v1alpha1.ECHKeyRingStatus, staged bool, ring echring.Ring) (metav1.ConditionStatus, string, string) {
	switch {
	case o.Problem != nil:
		return metav1.ConditionFalse, o.Problem.Reason, o.Problem.Message
	case o.DNSProblem != "":
		return metav1.ConditionFalse, v1alpha1.ReasonDNSUnavailable,
			fmt.Sprintf("DNS does not take or answer the ring's configs: %s. Nothing new is published and no config is destroyed before its time", o.DNSProblem)
	case st.PublishedConfig == nil:
		return metav1.ConditionFalse, v1alpha1.ReasonAwaitingDNS, "No config is published yet: the first is " + heldFor(o.Plan.Held, staged)
	}
	msg := fmt.Sprintf("Config %d is published and DNS answers it; epoch %d is delivered", *st.PublishedConfig, ring.Epoch)
	if staged {
		msg += "; the next config is " + heldFor(o.Plan.Held, staged)
	}
	return metav1.ConditionTrue, v1alpha1.ReasonPublished, msg
}

// overdue sets ConfirmationOverdue after pass o: True while the staged
// config waits for its fleet past its timeout, and, until the next config
// is published or overdue, how the published one got there when it was
// published unconfirmed. A pass with a problem leaves it as it was, once
// set.
func overdue(conds ringplan.Conditions, prev v1alpha1.ECHKeyRingStatus, o Pass, ring echring.Ring) {
	c := metav1.Condition{Type: v1alpha1.ConditionConfirmationOverdue,
		Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonOnSchedule, Message: "No staged config waits for its fleet past spec.confirmation.timeout"}
	was := meta.FindStatusCondition(prev.Conditions, c.Type)
	switch {
	case o.Plan.Published != nil && o.Plan.Unconfirmed:
		c.Reason, c.Message = v1alpha1.ReasonPublishedUnconfirmed, PublishedUnconfirmed(*o.Plan.Published, o.Seen)
	case o.Overdue && o.Problem == nil:
		c.Status, c.Reason = metav1.ConditionTrue, v1alpha1.ReasonAwaitingPods
		c.Message = fmt.Sprintf("The staged config is held back past spec.confirmation.timeout; the published config keeps serving, and the staged one is published unconfirmed at its ceiling, %s, once DNS answers it.",
			echring.CeilingAt(o.Policy, ring).UTC().Format(time.RFC3339)) + missingPods(o.Seen)
	case o.Recorded != nil && !o.Overdue && o.Plan.Published == nil && (was == nil || was.Reason != v1alpha1.ReasonPublishedUnconfirmed):
		seen := o.LastSeen
		if seen != nil && seen.StagedKey != fmt.Sprint(*o.Recorded) {
			seen = nil
		}
		c.Reason, c.Message = v1alpha1.ReasonPublishedUnconfirmed, PublishedUnconfirmed(*o.Recorded, seen)
	case was != nil && was.Reason == v1alpha1.ReasonPublishedUnconfirmed && !o.Overdue && o.Plan.Published == nil:
		// Until the next config is published or overdue, the condition
		// says how the published one got there.
		c.Reason, c.Message = was.Reason, was.Message
	}
	if o.Problem == nil || conds.Find(c.Type) == nil {
		conds.Keep(c)
	}
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

// warnings are the transitions of an ECHKeyRing's conditions that call
// for a Warning event: Ready turning False (or False for a new reason;
// AwaitingDNS, the first config on its way, is no fault), and
// ConfirmationOverdue turning True.
var warnings = []ringplan.Warn{
	{Type: v1alpha1.ConditionReady, Action: "Reconcile",
		Bad: func(c *metav1.Condition) bool {
			return c.Status == metav1.ConditionFalse && c.Reason != v1alpha1.ReasonAwaitingDNS
		}},
	{Type: v1alpha1.ConditionConfirmationOverdue, Bad: ringplan.Is(metav1.ConditionTrue), Action: "Reconcile"},
}

// Warnings are the Warning events the change of an ECHKeyRing's conditions
// from prev to next calls for.
func Warnings(prev, next []metav1.Condition) []ringplan.Event {
	return ringplan.Warnings(prev, next, warnings)
}

//go:build integration

package controller

import "github.com/ringmaster-io/ringmaster/api/v1alpha1"

// For controllers_test: the status write and what Reconcile returns of it.
var (
	ApplyRingStatus = applyStatus[v1alpha1.TicketKeyRingStatus]
	Result          = result
	ErrStaleStatus  = errStaleStatus
)

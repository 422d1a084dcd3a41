package api

import (
	"fmt"
	"net/http"

	"github.com/payments/payments/internal/idempotency"
	"github.com/payments/payments/internal/ledger"
	"github.com/payments/payments/internal/problem"
)

// TransferAnswer is the answer to a transfer in a final state, as POST /v1/transfers gives it:
// 201 with the transfer, or 422 insufficient-funds naming it. The ledger stores it in the
// posting's transaction (ledger.Answer), and it is replayed byte for byte.
func TransferAnswer(t ledger.Transfer) idempotency.Response {
	if t.Kind == ledger.KindRefund {
		return refundAnswer(ledger.RefundView(t))
	}
	if t.Status == ledger.TransferRejected {
		p := problem.New(http.StatusUnprocessableEntity, "insufficient-funds",
			fmt.Sprintf("account %s cannot cover %d %s", t.FromAccountID, t.AmountMinor, t.Currency))
		p.TransferID = t.ID
		return idempotency.Response{Status: p.Status, ContentType: problem.ContentType, Body: p.Body()}
	}
	return transferResponse(http.StatusCreated, t)
}

// refundAnswer is the answer to a refund in a final state, as POST /v1/transfers/{id}/refunds
// gives it: 201 with the refund, or 422 naming it and why it was refused. Stored with the
// refund's posting (through TransferAnswer) and replayed byte for byte.
func refundAnswer(r ledger.Refund) idempotency.Response {
	if r.Status != ledger.TransferRejected {
		return jsonAnswer(http.StatusCreated, "/v1/refunds/"+r.ID, r)
	}
	var p *problem.Problem
	switch reason := *r.FailureReason; reason {
	case ledger.ReasonRefundExceeds:
		p = problem.New(http.StatusUnprocessableEntity, "refund-exceeds-transfer",
			fmt.Sprintf("transfer %s has less than %d %s left to refund", r.TransferID, r.AmountMinor, r.Currency))
	case ledger.ReasonNotRefundable:
		p = problem.New(http.StatusUnprocessableEntity, "transfer-not-refundable", "transfer "+r.TransferID+" is not completed")
	default:
		p = problem.New(http.StatusUnprocessableEntity, "insufficient-funds",
			fmt.Sprintf("the destination account of transfer %s cannot cover %d %s", r.TransferID, r.AmountMinor, r.Currency))
	}
	p.RefundID, p.TransferID = r.ID, r.TransferID
	return idempotency.Response{Status: p.Status, ContentType: problem.ContentType, Body: p.Body()}
}

// pendingAnswer is the 202 for a transfer or refund still running after PAYMENTS_SYNC_WAIT. It
// is not stored: the final answer replaces it.
func pendingAnswer(t ledger.Transfer) idempotency.Response {
	if t.Kind == ledger.KindRefund {
		return jsonAnswer(http.StatusAccepted, "/v1/refunds/"+t.ID, ledger.RefundView(t))
	}
	return transferResponse(http.StatusAccepted, t)
}

func transferResponse(status int, t ledger.Transfer) idempotency.Response {
	return jsonAnswer(status, "/v1/transfers/"+t.ID, t)
}

// PayoutAnswer is the first answer to a payout, as POST /v1/payouts gives it: 201 with the
// payout processing (its money held), or 422 insufficient-funds naming it. The ledger stores it
// in the transaction that holds the money (ledger.PayoutAnswer), and it is replayed byte for
// byte.
func PayoutAnswer(po ledger.Payout) idempotency.Response {
	if po.Status == ledger.PayoutFailed && po.FailureReason != nil && *po.FailureReason == ledger.ReasonInsufficientFunds {
		p := problem.New(http.StatusUnprocessableEntity, "insufficient-funds",
			fmt.Sprintf("account %s does not have %d %s available", po.AccountID, po.AmountMinor, po.Currency))
		p.PayoutID = po.ID
		return idempotency.Response{Status: p.Status, ContentType: problem.ContentType, Body: p.Body()}
	}
	return payoutResponse(http.StatusCreated, po)
}

// ApprovalAnswer is the answer to an approval or a rejection of a payout, as the API gives it:
// stored in the transaction that decides it (ledger.ApprovalAnswer) and replayed byte for byte.
// 200 with the payout as the decision left it (approved: processing; rejected: failed), or, when
// it was not waiting for approval (another decision, its timeout, or it never needed one), 422
// payout-not-pending-approval with its status.
func ApprovalAnswer(po ledger.Payout, v ledger.Verdict, won bool) idempotency.Response {
	if won {
		return jsonAnswer(http.StatusOK, "", po)
	}
	p := problem.New(http.StatusUnprocessableEntity, "payout-not-pending-approval",
		fmt.Sprintf("payout %s is %s: only a payout pending approval can be %s", po.ID, po.Status, verdictPast[v]))
	p.PayoutID, p.PayoutStatus = po.ID, string(po.Status)
	return idempotency.Response{Status: p.Status, ContentType: problem.ContentType, Body: p.Body()}
}

var verdictPast = map[ledger.Verdict]string{ledger.VerdictApprove: "approved", ledger.VerdictReject: "rejected"}

func payoutResponse(status int, po ledger.Payout) idempotency.Response {
	return jsonAnswer(status, "/v1/payouts/"+po.ID, po)
}

// accountAnswer is the answer to POST /v1/accounts: 201 with the account. The ledger stores it
// with the account (ledger.OpenAccount), and it is replayed byte for byte.
func accountAnswer(a ledger.Account) idempotency.Response {
	return jsonAnswer(http.StatusCreated, "/v1/accounts/"+a.ID, a)
}

// endpointAnswer is the answer to POST /v1/webhook-endpoints: 201 with the endpoint and its
// secret, shown only here. The ledger stores it with the endpoint (ledger.RegisterEndpoint),
// and it is replayed byte for byte.
func endpointAnswer(e ledger.Endpoint) idempotency.Response {
	return jsonAnswer(http.StatusCreated, "/v1/webhook-endpoints/"+e.ID, e)
}

// AuthorizationAnswer is the answer to an authorization or to a decision on it, as the API gives
// it: stored in the transaction that decides it (ledger.AuthorizationAnswer) and replayed byte
// for byte. An authorization: 201 with it authorized, or 422 insufficient-funds naming it. A
// capture or a void: 200 with the authorization as it left it, or, when it had ended already
// (another decision or its expiry came first), 422 authorization-not-pending with its status.
func AuthorizationAnswer(a ledger.Authorization, action ledger.Action, won bool) idempotency.Response {
	var p *problem.Problem
	switch {
	case action == ledger.ActionAuthorize && won:
		return authorizationResponse(http.StatusCreated, a)
	case won:
		return jsonAnswer(http.StatusOK, "", a)
	case action == ledger.ActionAuthorize:
		p = problem.New(http.StatusUnprocessableEntity, "insufficient-funds",
			fmt.Sprintf("account %s does not have %d %s available", a.FromAccountID, a.AmountMinor, a.Currency))
	default:
		p = problem.New(http.StatusUnprocessableEntity, "authorization-not-pending",
			fmt.Sprintf("authorization %s is %s: only an authorized one can be %s", a.ID, a.Status, pastTense[action]))
		p.AuthorizationStatus = string(a.Status)
	}
	p.AuthorizationID = a.ID
	return idempotency.Response{Status: p.Status, ContentType: problem.ContentType, Body: p.Body()}
}

var pastTense = map[ledger.Action]string{ledger.ActionCapture: "captured", ledger.ActionVoid: "voided", ledger.ActionExpire: "expired"}

func authorizationResponse(status int, a ledger.Authorization) idempotency.Response {
	return jsonAnswer(status, "/v1/authorizations/"+a.ID, a)
}

// ScheduledTransferAnswer is the answer to a scheduled transfer's request, as the API gives it:
// 201 with the scheduled transfer as its run activated it. Stored in the transaction that
// activates it (ledger.ScheduledAnswer) and replayed byte for byte.
func ScheduledTransferAnswer(st ledger.ScheduledTransfer) idempotency.Response {
	return scheduledResponse(http.StatusCreated, st)
}

func scheduledResponse(status int, st ledger.ScheduledTransfer) idempotency.Response {
	return jsonAnswer(status, "/v1/scheduled-transfers/"+st.ID, st)
}

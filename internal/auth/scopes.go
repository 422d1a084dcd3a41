package auth

import (
	"fmt"
	"slices"
	"strings"
)

// Scope is one kind of thing a key may do (contract §10). Every read (GET) needs ScopeRead; each
// kind of write needs its own.
type Scope string

// The scopes a key may hold.
const (
	ScopeRead      Scope = "read"            // every GET
	ScopeTransfers Scope = "transfers"       // transfers, refunds, authorizations, scheduled transfers
	ScopePayouts   Scope = "payouts"         // payouts
	ScopeApprove   Scope = "payouts:approve" // approving or rejecting another key's payouts
	ScopeWebhooks  Scope = "webhooks"        // creating and deleting webhook endpoints
	ScopeAccounts  Scope = "accounts"        // opening accounts
)

// Scopes is every scope, in the order keys list them.
var Scopes = []Scope{ScopeRead, ScopeTransfers, ScopePayouts, ScopeApprove, ScopeWebhooks, ScopeAccounts}

// DefaultScopes is what a key created without --scope holds: everything but approving payouts,
// which takes a second key on purpose (contract §9).
var DefaultScopes = []Scope{ScopeRead, ScopeTransfers, ScopePayouts, ScopeWebhooks, ScopeAccounts}

// ParseScope returns the scope named s.
func ParseScope(s string) (Scope, error) {
	if slices.Contains(Scopes, Scope(s)) {
		return Scope(s), nil
	}
	return "", fmt.Errorf("unknown scope %q: want one of %s", s, strings.Join(scopeNames(Scopes), ", "))
}

// scopeNames returns scopes as strings, each once, in Scopes' order.
func scopeNames(scopes []Scope) []string {
	var names []string
	for _, s := range Scopes {
		if slices.Contains(scopes, s) {
			names = append(names, string(s))
		}
	}
	return names
}

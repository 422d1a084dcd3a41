// Package money holds the rules for amounts and currencies every edge applies before the ledger.
package money

import (
	"fmt"
	"slices"
)

// MaxAmountMinor is the largest amount a single transfer may move: 10^15 minor units, so that even
// a long run of them into one account cannot overflow int64 before PostgreSQL's bigint check.
const MaxAmountMinor int64 = 1_000_000_000_000_000

// Currencies are the ISO 4217 codes the ledger has funding accounts for (see the first migration).
var Currencies = []string{"USD", "EUR", "GBP", "JPY", "CHF", "CAD"}

// ValidCurrency reports whether code is a supported currency, upper-case as ISO 4217 writes it.
func ValidCurrency(code string) bool { return slices.Contains(Currencies, code) }

// CheckAmount returns why amount cannot be moved, or nil.
func CheckAmount(amount int64) error {
	if amount <= 0 {
		return fmt.Errorf("must be a positive integer number of minor units")
	}
	if amount > MaxAmountMinor {
		return fmt.Errorf("must not exceed %d", MaxAmountMinor)
	}
	return nil
}

// FundingAccountID is the id of the funding account of currency, created by the first migration.
func FundingAccountID(currency string) string {
	id := []byte("acc_funding_" + currency)
	for i := len("acc_funding_"); i < len(id); i++ {
		id[i] |= 0x20 // lower-case ASCII
	}
	return string(id)
}

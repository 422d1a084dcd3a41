package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/payments/payments/internal/auth"
	"github.com/payments/payments/internal/bank"
	"github.com/payments/payments/internal/config"
	"github.com/payments/payments/internal/database"
	"github.com/payments/payments/internal/idempotency"
	"github.com/payments/payments/internal/keyring"
	"github.com/payments/payments/internal/ledger"
	"github.com/payments/payments/internal/money"
	"github.com/payments/payments/internal/outage"
	"github.com/payments/payments/transfers"
)

func runMigrate(ctx context.Context, args []string, stdout io.Writer) error {
	if err := parse(newFlags("migrate"), args); err != nil {
		return err
	}
	cfg, err := config.FromEnv()
	if err != nil {
		return usagef("%v", err)
	}
	created, err := database.Create(ctx, cfg.DatabaseURL)
	if err != nil {
		return err
	}
	if created {
		fmt.Fprintln(stdout, "migrate: created the database")
	}
	db, err := database.Open(ctx, cfg.DatabaseURL)
	if err != nil {
		return err
	}
	defer db.Close()
	if err := database.Migrate(ctx, db, stdout); err != nil {
		return err
	}
	return sealSecrets(ctx, db, cfg.Temporal.Keys, stdout)
}

// sealSecrets seals the secrets not sealed with the first key (ledger.SealSecrets); without the
// keys it says how many are in plaintext.
func sealSecrets(ctx context.Context, db *pgxpool.Pool, keys *keyring.Ring, stdout io.Writer) error {
	if keys == nil {
		var n int
		if err := db.QueryRow(ctx, `SELECT count(*) FROM webhook_endpoints WHERE secret IS NOT NULL`).Scan(&n); err != nil || n == 0 {
			return err
		}
		fmt.Fprintf(stdout, "migrate: %d webhook secrets are stored in plaintext: set PAYMENTS_CODEC_KEYS and run migrate again to seal them\n", n)
		return nil
	}
	n, err := ledger.SealSecrets(ctx, db, keys)
	if n > 0 {
		fmt.Fprintf(stdout, "migrate: sealed %d secrets with the key %s\n", n, keys.KeyID())
	}
	return err
}

func runKeys(ctx context.Context, args []string, stdout io.Writer) error {
	if len(args) > 0 {
		switch args[0] {
		case "create":
			return createKey(ctx, args[1:], stdout)
		case "list":
			return listKeys(ctx, args[1:], stdout)
		case "revoke":
			return revokeKey(ctx, args[1:], stdout)
		}
	}
	return usagef("keys: usage: keys create --owner NAME [--scope S]… | keys list --owner NAME | keys revoke KEY_ID")
}

// scopeFlags is --scope given any number of times.
type scopeFlags []auth.Scope

func (f *scopeFlags) String() string { return fmt.Sprint(*f) }

func (f *scopeFlags) Set(v string) error {
	s, err := auth.ParseScope(v)
	if err == nil {
		*f = append(*f, s)
	}
	return err
}

func createKey(ctx context.Context, args []string, stdout io.Writer) error {
	fs := newFlags("keys create")
	ownerName := fs.String("owner", "", "owner name")
	var scopes scopeFlags
	fs.Var(&scopes, "scope", "a scope of the key, once per scope: read, transfers, payouts, payouts:approve, webhooks, accounts (default: all but payouts:approve)")
	if err := parse(fs, args, "owner"); err != nil {
		return err
	}
	if *ownerName == "" || *ownerName == auth.SystemOwner {
		return usagef("keys create: --owner must not be empty, and %q is reserved for the funding accounts", auth.SystemOwner)
	}
	return withDB(ctx, func(l *ledger.Ledger) error {
		key, _, err := auth.CreateKey(ctx, l.DB, *ownerName, scopes...)
		if err == nil {
			fmt.Fprintln(stdout, key)
		}
		return err
	})
}

// listKeys prints the owner's keys, one line each, never the key itself.
func listKeys(ctx context.Context, args []string, stdout io.Writer) error {
	fs := newFlags("keys list")
	ownerName := fs.String("owner", "", "owner name")
	if err := parse(fs, args, "owner"); err != nil {
		return err
	}
	return withDB(ctx, func(l *ledger.Ledger) error {
		keys, err := auth.Keys(ctx, l.DB, *ownerName)
		if err != nil {
			return err
		}
		w := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(w, "ID\tSCOPES\tCREATED\tLAST USED\tREVOKED")
		for _, k := range keys {
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", k.ID, joinScopes(k.Scopes), k.CreatedAt.UTC().Format(time.RFC3339),
				when(k.LastUsedAt, "never"), when(k.RevokedAt, "-"))
		}
		return w.Flush()
	})
}

func joinScopes(scopes []auth.Scope) string {
	names := make([]string, len(scopes))
	for i, s := range scopes {
		names[i] = string(s)
	}
	return strings.Join(names, ",")
}

func when(t *time.Time, none string) string {
	if t == nil {
		return none
	}
	return t.UTC().Format(time.RFC3339)
}

// revokeKey revokes the key KEY_ID: every API process answers it 401 from then on.
func revokeKey(ctx context.Context, args []string, stdout io.Writer) error {
	if len(args) == 1 && isHelp(args[0]) {
		return helpRequested{newFlags("keys revoke")}
	}
	if len(args) != 1 || strings.HasPrefix(args[0], "-") {
		return usagef("keys revoke: usage: keys revoke KEY_ID (an id that keys list shows)")
	}
	id := args[0]
	return withDB(ctx, func(l *ledger.Ledger) error {
		already, err := auth.Revoke(ctx, l.DB, id)
		switch {
		case errors.Is(err, auth.ErrNoSuchKey):
			return fmt.Errorf("keys revoke: no API key has the id %q (keys list --owner NAME shows them)", id)
		case err != nil:
			return err
		case already:
			fmt.Fprintf(stdout, "%s was already revoked\n", id)
		default:
			fmt.Fprintf(stdout, "%s revoked\n", id)
		}
		return nil
	})
}

func runAccounts(ctx context.Context, args []string, stdout io.Writer) error {
	if len(args) == 0 || args[0] != "create" {
		return usagef("accounts: usage: accounts create --owner NAME --currency CUR [--name TEXT]")
	}
	fs := newFlags("accounts create")
	ownerName := fs.String("owner", "", "owner name")
	currency := fs.String("currency", "", "ISO 4217 code")
	name := fs.String("name", "", "account name")
	if err := parse(fs, args[1:], "owner", "currency"); err != nil {
		return err
	}
	if !money.ValidCurrency(*currency) {
		return usagef("accounts create: --currency must be one of %v", money.Currencies)
	}
	if *ownerName == "" || *ownerName == auth.SystemOwner || len([]rune(*name)) > 100 {
		return usagef("accounts create: --owner must not be empty nor %q, and --name at most 100 characters", auth.SystemOwner)
	}
	return withDB(ctx, func(l *ledger.Ledger) error {
		ownerID, err := auth.EnsureOwner(ctx, l.DB, *ownerName)
		if err != nil {
			return err
		}
		acc, err := ledger.CreateAccount(ctx, l.DB, ledger.NewID("acc_"), ownerID, *currency, *name, nil)
		if err != nil {
			return err
		}
		return printJSON(stdout, acc)
	})
}

func runDeposit(ctx context.Context, args []string, stdout io.Writer) error {
	fs := newFlags("deposit")
	account := fs.String("account", "", "account id")
	amount := fs.Int64("amount-minor", 0, "amount in minor units")
	key := fs.String("idempotency-key", "", "idempotency key (a new one when absent)")
	if err := parse(fs, args, "account", "amount-minor"); err != nil {
		return err
	}
	if err := money.CheckAmount(*amount); err != nil {
		return usagef("deposit: --amount-minor %v", err)
	}
	if *key == "" {
		b := make([]byte, 16)
		_, _ = rand.Read(b)
		*key = "deposit-" + hex.EncodeToString(b)
	} else if _, err := idempotency.ParseKey([]string{*key}); err != nil {
		return usagef("deposit: --idempotency-key: %v", err)
	}
	d, err := open(ctx, false)
	if err != nil {
		return err
	}
	defer d.close()
	answer, err := d.app(nil).Transfers.Deposit(ctx, *account, *amount, *key)
	if err != nil {
		return depositError(err, *account, *key)
	}
	if answer.Pending != nil { // still running: the transfer as it stands; the same key answers later
		return printJSON(stdout, answer.Pending)
	}
	fmt.Fprintln(stdout, string(answer.Body))
	if answer.Status >= 300 {
		return errExitOne
	}
	return nil
}

// depositError says in the command's own words what went wrong with a deposit, and what to do.
func depositError(err error, account, key string) error {
	var (
		failed *transfers.FailedError
		inUse  *transfers.InUseError
	)
	again := "run the same command again with --idempotency-key " + key
	switch {
	case errors.Is(err, transfers.ErrNotCustomer):
		return usagef("deposit: no customer account %q", account)
	case errors.Is(err, idempotency.ErrReused):
		return fmt.Errorf("deposit: --idempotency-key %s was first used for another deposit; use a new key", key)
	case errors.As(err, &failed):
		return fmt.Errorf("deposit: transfer %s failed after its retries and moved no money; %s", failed.ID, again)
	case errors.As(err, &inUse):
		return fmt.Errorf("deposit: transfer %s is still running; %s later for its answer", inUse.ID, again)
	}
	if o, ok := outage.As(err); ok {
		return fmt.Errorf("deposit: %s is unreachable (%v); nothing was done twice: %s", o.Dependency, o.Err, again)
	}
	return fmt.Errorf("deposit: %w", err)
}

// runReconcile checks the ledger invariants (docs/contract.md §4, docs/ledger.md). The idempotency
// TTL in the environment tells a key's legitimate second use from a scope that moved money twice.
func runReconcile(ctx context.Context, args []string, stdout io.Writer) error {
	if err := parse(newFlags("reconcile"), args); err != nil {
		return err
	}
	cfg, err := config.FromEnv()
	if err != nil {
		return usagef("%v", err)
	}
	return withDB(ctx, func(l *ledger.Ledger) error {
		fmt.Fprintln(stdout, "reconcile: checking the ledger…")
		// One snapshot for every check, so a busy ledger is seen as of one instant.
		tx, err := l.DB.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
		if err != nil {
			return err
		}
		defer tx.Rollback(ctx)
		report, err := ledger.Reconcile(ctx, tx, cfg.IdempotencyTTL, bankStatement(ctx, cfg.Bank.URL, stdout))
		if err != nil {
			return err
		}
		report.Print(stdout)
		if !report.OK() {
			return errExitOne
		}
		return nil
	})
}

// bankStatement reads the bank's statement for invariant 8, or says why it could not (nil).
func bankStatement(ctx context.Context, url string, stdout io.Writer) []bank.Payment {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	statement, err := (&bank.HTTP{BaseURL: url}).Statement(ctx)
	if err != nil {
		fmt.Fprintf(stdout, "reconcile: the bank at %s did not give its statement (%v)\n", url, err)
		return nil
	}
	return statement
}

func withDB(ctx context.Context, f func(*ledger.Ledger) error) error {
	cfg, err := config.FromEnv()
	if err != nil {
		return usagef("%v", err)
	}
	db, err := database.Open(ctx, cfg.DatabaseURL)
	if err != nil {
		return err
	}
	defer db.Close()
	return f(&ledger.Ledger{DB: db})
}

func printJSON(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(w, string(b))
	return err
}

// maxPending is how many payouts `payouts pending` lists at most; it says when there are more.
const maxPending = 1000

// runPayouts runs `payouts pending`: one line per payout waiting for approval, oldest first,
// with what a second person needs to decide (contract §9).
func runPayouts(ctx context.Context, args []string, stdout io.Writer) error {
	if len(args) == 0 || args[0] != "pending" {
		return usagef("payouts: usage: payouts pending")
	}
	if err := parse(newFlags("payouts pending"), args[1:]); err != nil {
		return err
	}
	return withDB(ctx, func(l *ledger.Ledger) error {
		pending, err := l.PendingApprovals(ctx, maxPending+1)
		if err != nil {
			return err
		}
		w := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
		for i, po := range pending {
			if i == maxPending {
				fmt.Fprintf(w, "… and more: the first %d are listed\n", maxPending)
				break
			}
			fmt.Fprintf(w, "%s\t%s\t%d %s\tsince %s\tdue by %s\tasked by %s\n", po.ID, po.AccountID, po.AmountMinor, po.Currency,
				po.CreatedAt.UTC().Format(time.RFC3339), po.ApprovalDueAt.UTC().Format(time.RFC3339), orDash(po.CreatedByKey))
		}
		return w.Flush()
	})
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

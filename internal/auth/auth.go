// Package auth holds owners and their API keys. Keys are random, shown once when issued and
// stored only as a SHA-256 digest.
package auth

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/payments/payments/internal/database"
	"github.com/payments/payments/internal/ledger"
)

// KeyPrefix starts every API key, so a leaked key is recognisable in logs and scanners.
const KeyPrefix = "pk_"

// ErrUnknownKey means the key is not one this service issued.
var ErrUnknownKey = errors.New("unknown API key")

// ErrRevokedKey means the key was issued and has been revoked.
var ErrRevokedKey = errors.New("revoked API key")

// SystemOwner names the owner of the funding accounts: the ledger's own, which no API key may
// act for (its key could move money out of nothing).
const SystemOwner = "system"

// SystemOwnerID is the system owner's id (the first migration creates it).
const SystemOwnerID = "own_system"

// ErrReservedOwner refuses to give the system owner a key or an account.
var ErrReservedOwner = errors.New(`the owner "system" holds the funding accounts and is reserved`)

func hash(key string) []byte {
	sum := sha256.Sum256([]byte(key))
	return sum[:]
}

// EnsureOwner returns the id of the owner called name, creating the owner if new.
func EnsureOwner(ctx context.Context, db database.Querier, name string) (string, error) {
	if name == SystemOwner {
		return "", ErrReservedOwner
	}
	var id string
	err := db.QueryRow(ctx, `
		WITH ins AS (
			INSERT INTO owners (id, name) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING RETURNING id
		)
		SELECT id FROM ins UNION ALL SELECT id FROM owners WHERE name = $2`,
		ledger.NewID("own_"), name).Scan(&id)
	return id, err
}

// CreateKey issues a new API key with scopes for the owner called name, as AddKey does.
func CreateKey(ctx context.Context, db database.Querier, name string, scopes ...Scope) (key, ownerID string, err error) {
	b := make([]byte, 24)
	_, _ = rand.Read(b)
	key = KeyPrefix + base64.RawURLEncoding.EncodeToString(b)
	ownerID, err = AddKey(ctx, db, name, key, scopes...)
	return key, ownerID, err
}

// AddKey registers key with scopes (DefaultScopes when none) for the owner called name (created
// if new) and returns the owner's id. Registering a key twice is harmless (the demo seed's).
func AddKey(ctx context.Context, db database.Querier, name, key string, scopes ...Scope) (ownerID string, err error) {
	if len(scopes) == 0 {
		scopes = DefaultScopes
	}
	if ownerID, err = EnsureOwner(ctx, db, name); err != nil {
		return "", err
	}
	_, err = db.Exec(ctx, `INSERT INTO api_keys (id, key_hash, owner_id, scopes) VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING`,
		ledger.NewID("key_"), hash(key), ownerID, scopeNames(scopes))
	return ownerID, err
}

// Key is an issued API key as it is stored: never the key itself.
type Key struct {
	ID         string     `json:"id"`
	OwnerID    string     `json:"owner_id"`
	Scopes     []Scope    `json:"scopes"`
	CreatedAt  time.Time  `json:"created_at"`
	LastUsedAt *time.Time `json:"last_used_at"` // to the minute (Authenticate)
	RevokedAt  *time.Time `json:"revoked_at"`
}

// Allows reports whether the key holds scope s.
func (k Key) Allows(s Scope) bool { return slices.Contains(k.Scopes, s) }

// Authenticate returns the key that key is, and notes its use. Nothing is cached, so a revocation
// holds at once on every API process (contract §10). The last use is written when the one stored
// is a minute old: one write a minute per key in use, not one per request.
func Authenticate(ctx context.Context, db database.Querier, key string) (Key, error) {
	if !strings.HasPrefix(key, KeyPrefix) {
		return Key{}, ErrUnknownKey
	}
	var (
		k       Key
		scopes  []string
		revoked bool
	)
	// A key issued to the system owner before it was reserved opens nothing.
	err := db.QueryRow(ctx, `
		WITH used AS (
			UPDATE api_keys SET last_used_at = now()
			WHERE key_hash = $1 AND revoked_at IS NULL AND (last_used_at IS NULL OR last_used_at < now() - interval '1 minute')
		)
		SELECT id, owner_id, scopes, created_at, revoked_at IS NOT NULL FROM api_keys WHERE key_hash = $1 AND owner_id <> $2`,
		hash(key), SystemOwnerID).Scan(&k.ID, &k.OwnerID, &scopes, &k.CreatedAt, &revoked)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return Key{}, ErrUnknownKey
	case err != nil:
		return Key{}, err
	case revoked:
		return Key{}, ErrRevokedKey
	}
	for _, s := range scopes {
		k.Scopes = append(k.Scopes, Scope(s))
	}
	return k, nil
}

// Keys returns the keys of the owner called name, oldest first, revoked ones included.
func Keys(ctx context.Context, db database.Querier, name string) ([]Key, error) {
	rows, err := db.Query(ctx, `
		SELECT k.id, k.owner_id, k.scopes, k.created_at, k.last_used_at, k.revoked_at
		FROM api_keys k JOIN owners o ON o.id = k.owner_id WHERE o.name = $1 ORDER BY k.created_at, k.id`, name)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (Key, error) {
		var (
			k      Key
			scopes []string
		)
		err := row.Scan(&k.ID, &k.OwnerID, &scopes, &k.CreatedAt, &k.LastUsedAt, &k.RevokedAt)
		for _, s := range scopes {
			k.Scopes = append(k.Scopes, Scope(s))
		}
		return k, err
	})
}

// ErrNoSuchKey means no key has the id given.
var ErrNoSuchKey = errors.New("no API key has this id")

// Revoke revokes the key with id (already: it was): from the commit on, every API process answers
// it 401.
func Revoke(ctx context.Context, db database.Querier, id string) (already bool, err error) {
	var first bool
	err = db.QueryRow(ctx, `
		WITH revoked AS (
			UPDATE api_keys SET revoked_at = now() WHERE id = $1 AND revoked_at IS NULL RETURNING id
		)
		SELECT EXISTS (SELECT 1 FROM revoked) FROM api_keys WHERE id = $1`, id).Scan(&first)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, ErrNoSuchKey
	}
	return !first, err
}

// Package auth holds owners and their API keys. Keys are random, shown once when issued and
// stored only as a SHA-256 digest.
package auth

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/payments/payments/internal/database"
	"github.com/payments/payments/internal/ledger"
)

// KeyPrefix starts every API key, so a leaked key is recognisable in logs and scanners.
const KeyPrefix = "pk_"

// ErrUnknownKey means the key is not one this service issued.
var ErrUnknownKey = errors.New("unknown API key")

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

// CreateKey issues a new API key for the owner called name (created if new) and returns the key
// and the owner's id.
func CreateKey(ctx context.Context, db database.Querier, name string) (key, ownerID string, err error) {
	b := make([]byte, 24)
	_, _ = rand.Read(b)
	key = KeyPrefix + base64.RawURLEncoding.EncodeToString(b)
	ownerID, err = AddKey(ctx, db, name, key)
	return key, ownerID, err
}

// AddKey registers key for the owner called name (created if new) and returns the owner's id.
// Registering a key twice is harmless; it is how the demo seed stays idempotent.
func AddKey(ctx context.Context, db database.Querier, name, key string) (ownerID string, err error) {
	if ownerID, err = EnsureOwner(ctx, db, name); err != nil {
		return "", err
	}
	_, err = db.Exec(ctx, `INSERT INTO api_keys (key_hash, owner_id) VALUES ($1, $2) ON CONFLICT DO NOTHING`, hash(key), ownerID)
	return ownerID, err
}

// Owner returns the id of the owner that holds key.
func Owner(ctx context.Context, db database.Querier, key string) (string, error) {
	if !strings.HasPrefix(key, KeyPrefix) {
		return "", ErrUnknownKey
	}
	var id string
	// A key issued to the system owner before it was reserved opens nothing.
	err := db.QueryRow(ctx, `SELECT owner_id FROM api_keys WHERE key_hash = $1 AND owner_id <> $2`,
		hash(key), SystemOwnerID).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", ErrUnknownKey
	}
	return id, err
}

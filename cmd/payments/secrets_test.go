package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/payments/payments/internal/auth"
	"github.com/payments/payments/internal/idempotency"
	"github.com/payments/payments/internal/keyring"
	"github.com/payments/payments/internal/ledger"
	"github.com/payments/payments/internal/webhook"
	"github.com/payments/payments/rig/testenv"
)

// Sealed secrets stay readable across a rotation of PAYMENTS_CODEC_KEYS, and `payments migrate`
// seals, under the new first key, both those sealed with the old one and those stored in
// plaintext before secrets were sealed; after it the old key may go. On a database of its own:
// migrate reseals every secret it holds.
func TestSecretsSurviveARotationAndMigrateSealsTheRest(t *testing.T) {
	ctx := context.Background()
	url, db := testenv.FreshPool(t, "payments_test_cli_secrets")
	owner, err := auth.EnsureOwner(ctx, db, t.Name())
	if err != nil {
		t.Fatal(err)
	}
	old := testenv.Keys
	newKeys := keyring.Generate("k2")
	rotated, err := keyring.Parse(newKeys + "," + testenv.CodecKeys)
	if err != nil {
		t.Fatal(err)
	}
	onlyNew, _ := keyring.Parse(newKeys)

	// One endpoint sealed with the old key, and one stored in plaintext as before sealing.
	scope := idempotency.Scope{OwnerID: owner, Route: idempotency.RouteEndpoints, Key: "sealed"}
	register := func(keys *keyring.Ring, s idempotency.Scope) (idempotency.Response, bool, string) {
		t.Helper()
		resp, replayed, id, err := (&ledger.Ledger{DB: db, Keys: keys}).RegisterEndpoint(ctx, s, []byte("fp"), time.Hour,
			webhook.Policy{AllowInsecure: true, LoopbackOnly: true}, ledger.Endpoint{URL: "http://127.0.0.1:9/h", EventTypes: []string{"*"}},
			func(e ledger.Endpoint) idempotency.Response {
				b, _ := json.Marshal(e)
				return idempotency.Response{Status: 201, ContentType: "application/json", Body: b}
			})
		if err != nil {
			t.Fatal(err)
		}
		return resp, replayed, id
	}
	first, _, sealedID := register(old, scope)
	var shown ledger.Endpoint
	_ = json.Unmarshal(first.Body, &shown)
	legacy := idempotency.Scope{OwnerID: owner, Route: idempotency.RouteEndpoints, Key: "legacy"}
	legacyBody := `{"id":"we_legacy","url":"http://127.0.0.1:9/h","event_types":["*"],"secret":"whsec_legacy"}`
	if _, err := db.Exec(ctx, `INSERT INTO webhook_endpoints (id, owner_id, url, event_types, secret)
		VALUES ('we_legacy', $1, 'http://127.0.0.1:9/h', '{*}', 'whsec_legacy')`, owner); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(ctx, `INSERT INTO idempotency_records (owner_id, route, key, fingerprint, resource_id, status_code,
		content_type, body, completed_at, expires_at) VALUES ($1, $2, 'legacy', 'fp', 'we_legacy', 201, 'application/json', $3, now(), now() + interval '1 hour')`,
		owner, legacy.Route, []byte(legacyBody)); err != nil {
		t.Fatal(err)
	}

	// Rotated (the new key first, the old kept): what the old key sealed still opens.
	target := func(keys *keyring.Ring, id string) (string, error) {
		tg, err := (&ledger.Ledger{DB: db, Keys: keys}).Target(ctx, id)
		return tg.Secret, err
	}
	if got, err := target(rotated, sealedID); err != nil || got != shown.Secret {
		t.Fatalf("after the rotation: %q %v, want %q", got, err, shown.Secret)
	}
	if _, err := target(onlyNew, sealedID); err == nil {
		t.Fatal("the new key alone opened what the old one sealed")
	}

	commandsOn(t, url)
	t.Setenv("PAYMENTS_CODEC_KEYS", newKeys+","+testenv.CodecKeys)
	var out bytes.Buffer
	if err := dispatch(ctx, []string{"migrate"}, &out); err != nil || !strings.Contains(out.String(), "sealed 4 secrets with the key k2") {
		t.Fatalf("migrate: %v\n%s", err, out.String())
	}
	out.Reset()
	if err := dispatch(ctx, []string{"migrate"}, &out); err != nil || strings.Contains(out.String(), "sealed") {
		t.Fatalf("migrate again: %v\n%s", err, out.String())
	}

	// The old key retired: everything opens with the new one alone, and replays as it was.
	for id, want := range map[string]string{sealedID: shown.Secret, "we_legacy": "whsec_legacy"} {
		if got, err := target(onlyNew, id); err != nil || got != want {
			t.Errorf("%s with the new key alone: %q %v, want %q", id, got, err, want)
		}
	}
	if again, replayed, _ := register(onlyNew, scope); !replayed || !bytes.Equal(again.Body, first.Body) {
		t.Errorf("the sealed answer replayed: %v %s, want %s", replayed, again.Body, first.Body)
	}
	if again, replayed, _ := register(onlyNew, legacy); !replayed || string(again.Body) != legacyBody {
		t.Errorf("the legacy answer replayed: %v %s, want %s", replayed, again.Body, legacyBody)
	}
	var plain int
	if err := db.QueryRow(ctx, `SELECT (SELECT count(*) FROM webhook_endpoints WHERE secret IS NOT NULL OR secret_key <> 'k2')
		+ (SELECT count(*) FROM idempotency_records WHERE body_key IS DISTINCT FROM 'k2')`).Scan(&plain); err != nil || plain != 0 {
		t.Errorf("%d secrets not sealed with the new key (%v)", plain, err)
	}
}

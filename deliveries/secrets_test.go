package deliveries_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/payments/payments/internal/idempotency"
	"github.com/payments/payments/rig/testenv"
)

// An endpoint's secret is nowhere in PostgreSQL in plaintext (contract §10): not in its row,
// not in the stored answer that showed it; yet the answer replays byte for byte, secret and all,
// and deliveries are signed with it.
func TestSecretsAreSealedAtRest(t *testing.T) {
	ownerID, key := env.Owner(t)
	a, b := env.Account(t, key, "USD"), env.Account(t, key, "USD")
	env.Fund(t, a, 1_000)
	recv := newReceiver(t, nil)
	body, _ := json.Marshal(map[string]any{"url": recv.srv.URL + "/hooks", "event_types": []string{"transfer.completed"}})
	first := env.Do(t, "POST", "/v1/webhook-endpoints", key, t.Name(), string(body))
	if first.Status != http.StatusCreated {
		t.Fatalf("POST /v1/webhook-endpoints: %d %s", first.Status, first.Body)
	}
	id, secret := first.JSON(t)["id"].(string), first.JSON(t)["secret"].(string)
	recv.mu.Lock()
	recv.secret = secret
	recv.mu.Unlock()

	ctx := context.Background()
	var (
		plain                *string
		keyID, answerKey     string
		sealed, storedAnswer []byte
	)
	if err := env.DB.QueryRow(ctx, `SELECT secret, secret_key, secret_sealed FROM webhook_endpoints WHERE id = $1`, id).
		Scan(&plain, &keyID, &sealed); err != nil {
		t.Fatal(err)
	}
	if err := env.DB.QueryRow(ctx, `SELECT body, body_key FROM idempotency_records WHERE owner_id = $1 AND route = $2 AND key = $3`,
		ownerID, idempotency.RouteEndpoints, t.Name()).Scan(&storedAnswer, &answerKey); err != nil {
		t.Fatal(err)
	}
	if plain != nil || keyID != testenv.Keys.KeyID() || answerKey != keyID ||
		bytes.Contains(sealed, []byte(secret)) || bytes.Contains(storedAnswer, []byte(secret)) || bytes.Contains(storedAnswer, []byte(id)) {
		t.Fatalf("the secret at rest: plain %v, keys %q %q, sealed %q, answer %q", plain, keyID, answerKey, sealed, storedAnswer)
	}
	var found int
	if err := env.DB.QueryRow(ctx, `SELECT (SELECT count(*) FROM webhook_endpoints w WHERE w::text LIKE '%' || $1 || '%')
		+ (SELECT count(*) FROM idempotency_records r WHERE r::text LIKE '%' || $1 || '%' OR position(convert_to($1, 'UTF8') in r.body) > 0)`,
		secret).Scan(&found); err != nil || found != 0 {
		t.Fatalf("%d rows hold the secret in plaintext (%v)", found, err)
	}

	again := env.Do(t, "POST", "/v1/webhook-endpoints", key, t.Name(), string(body))
	if again.Status != http.StatusCreated || !bytes.Equal(again.Body, first.Body) || again.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("the replay: %d %s, want the first answer byte for byte", again.Status, again.Body)
	}
	transfer(t, key, t.Name()+"-paid", a, b, 100)
	testenv.WaitForCount(t, "the delivery of transfer.completed", 1, func() int { return len(recv.delivered()) })
	recv.checkSignatures(t)
}

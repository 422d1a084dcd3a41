package idempotency

import (
	"bytes"
	"crypto/sha256"
	"testing"
)

// The fingerprint of a decoded request equals what the canonical body gave before requests were
// fingerprinted decoded: records stored then still match their retries.
func TestFingerprintOfADecodedRequestMatchesItsCanonicalBody(t *testing.T) {
	type request struct {
		From        string `json:"from_account_id"`
		Amount      int64  `json:"amount_minor"`
		Description string `json:"description,omitempty"`
	}
	for _, c := range []struct {
		req  request
		body string
	}{
		{request{"acc_1", 1250, "rent <May> & more"}, `{"from_account_id":"acc_1","amount_minor":1250,"description":"rent <May> & more"}`},
		{request{"acc_1", 7, ""}, `{ "amount_minor": 7, "from_account_id": "acc_\u0031" }`},
	} {
		got, err := Fingerprint(RouteTransfers, c.req)
		if err != nil {
			t.Fatal(err)
		}
		canon, _ := Canonical([]byte(c.body))
		want := sha256.Sum256(append([]byte(RouteTransfers+"\x00"), canon...))
		if !bytes.Equal(got, want[:]) {
			t.Fatalf("%+v: fingerprint differs from that of %s", c.req, c.body)
		}
	}
	if _, err := Fingerprint(RouteTransfers, []byte(`{}`)); err == nil {
		t.Fatal("a raw body must not be fingerprinted as if decoded")
	}
}

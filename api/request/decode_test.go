package request

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"unicode"

	"github.com/payments/payments/internal/problem"
)

// A differential test of the two readings of a request body: the fingerprint that decides
// whether a retry is the same request, and the decoded request the handler executes. They must
// never disagree, whatever the member names' order, case or repetition.

var transferSeeds = []string{
	`{"from_account_id":"acc_a","to_account_id":"acc_b","amount_minor":100,"currency":"USD","description":"rent"}`,
	`{"from_account_id":"acc_a","to_account_id":"acc_b","amount_minor":100,"AMOUNT_MINOR":5,"currency":"USD"}`,
	`{"from_account_id":"acc_a","to_account_id":"acc_b","amount_minor":100,"amount_minor":5,"currency":"USD"}`,
	`{"from_account_id":"acc_a","to_account_id":"acc_b","amount\u005fminor":5,"amount_minor":100,"currency":"USD"}`,
	`{"from_account_id":"acc_a","to_account_id":"acc_b","amount_minor":100,"currency":"USD","description":""}`,
	`{"from_account_id":"acc_a","to_account_id":"acc_b","amount_minor":100,"currency":"USD","description":null}`,
	`{"currency":"USD","amount_minor":100,"to_account_id":"acc_b","from_account_id":"acc_a"}`,
	`{"from_account_id":"acc_a","to_account_id":"acc_b","amount_minor":1e2,"currency":"USD"}`,
	`{"from_account_id":"acc_a","to_account_id":"acc_b","amount_minor":100,"currency":"USD","description":"a\u0000b"}`,
	`{"from_account_id":"acc_\u0061","to_account_id":"acc_b","amount_minor":100,"currency":"USD","description":"<&>"}`,
	`{"from_account_id":"acc_a","to_account_id":"acc_b","amount_minor":100,"currency":"USD","metadata":{"order":"1","Order":"2"}}`,
	`{"from_account_id":"acc_a","to_account_id":"acc_b","amount_minor":100,"currency":"USD","metadata":{"order":"1","order":"2"}}`,
	`{"from_account_id":"acc_a","to_account_id":"acc_b","amount_minor":100,"currency":"USD","metadata":{"order":null}}`,
	`{"from_account_id":"acc_a","to_account_id":"acc_b","amount_minor":100,"currency":"USD","metadata":{}}`,
}

var accountSeeds = []string{
	`{"currency":"EUR","name":"Main"}`,
	`{"currency":"EUR","Currency":"GBP"}`,
	`{"currency":"EUR","currency":"GBP"}`,
	`{"name":"Main","currency":"EUR"}`,
	`{"currency":"EUR","name":""}`,
}

var refundSeeds = []string{
	`{}`,
	`{"amount_minor":100}`,
	`{"amount_minor":0}`,
	`{"amount_minor":100,"description":"damaged","metadata":{"case":"42"}}`,
	`{"metadata":{"case":"42"},"amount_minor":100}`,
	`{"amount_minor":100,"transfer_id":"tr_other"}`,
	`{"amount_minor":null}`,
}

var endpointSeeds = []string{
	`{"url":"https://hooks.example.com/p","event_types":["transfer.completed","payout.paid"]}`,
	`{"url":"https://hooks.example.com/p","event_types":["*"]}`,
	`{"event_types":["payout.paid","transfer.completed"],"url":"https://hooks.example.com/p"}`,
	`{"url":"https://hooks.example.com/p","URL":"https://other.example.com/","event_types":["*"]}`,
	`{"url":"https://hooks.example.com/p","event_types":["*"],"event_types":["payout.paid"]}`,
	`{"url":"https://hooks.example.com/p","event_types":[{"x":1}]}`,
}

var scheduledSeeds = []string{
	`{"from_account_id":"acc_a","to_account_id":"acc_b","amount_minor":100,"currency":"USD","start_at":"2030-01-01T00:00:00Z"}`,
	`{"from_account_id":"acc_a","to_account_id":"acc_b","amount_minor":100,"currency":"USD","start_at":"2030-01-01T01:00:00+01:00","interval":"2s","count":3}`,
	`{"from_account_id":"acc_a","to_account_id":"acc_b","amount_minor":100,"currency":"USD","start_at":"2030-01-01T00:00:00Z","interval":"24h","metadata":{"rent":"flat 2"}}`,
	`{"from_account_id":"acc_a","to_account_id":"acc_b","amount_minor":100,"currency":"USD","start_at":"2030-01-01T00:00:00Z","count":2}`,
	`{"from_account_id":"acc_a","to_account_id":"acc_b","amount_minor":100,"currency":"USD","start_at":"2030-01-01T00:00:00Z","interval":"500ms"}`,
	`{"from_account_id":"acc_a","to_account_id":"acc_b","amount_minor":100,"currency":"USD","start_at":"2030-01-01","interval":"1s"}`,
	`{"from_account_id":"acc_a","to_account_id":"acc_b","amount_minor":100,"currency":"USD","start_at":"2030-01-01T00:00:00Z","count":1.5}`,
	`{"from_account_id":"acc_a","to_account_id":"acc_b","amount_minor":100,"currency":"USD","start_at":"2030-01-01T00:00:00Z","interval":"1s","Interval":"2s"}`,
	`{"from_account_id":"acc_a","to_account_id":"acc_b","amount_minor":100,"currency":"USD","start_at":"2030-01-01T00:00:00Z","count":null,"interval":""}`,
}

type decoder func([]byte) (any, []byte, error)

func transferDecoder(b []byte) (any, []byte, error) { return DecodeTransfer(b) }
func accountDecoder(b []byte) (any, []byte, error)  { return DecodeAccount(b) }

func endpointDecoder(b []byte) (any, []byte, error) {
	return DecodeEndpoint(b, []string{"transfer.completed", "payout.paid"})
}

func FuzzEndpointDecoding(f *testing.F) {
	for _, s := range endpointSeeds {
		f.Add([]byte(s), []byte(endpointSeeds[0]), uint64(1))
	}
	f.Fuzz(func(t *testing.T, a, b []byte, seed uint64) { checkDecoding(t, endpointDecoder, a, b, seed) })
}

func FuzzTransferDecoding(f *testing.F) {
	for _, s := range transferSeeds {
		f.Add([]byte(s), []byte(transferSeeds[0]), uint64(1))
	}
	f.Fuzz(func(t *testing.T, a, b []byte, seed uint64) { checkDecoding(t, transferDecoder, a, b, seed) })
}

// refundDecoder decodes a refund of one transfer; the decoded request is shown without the
// transfer (which comes from the path), so that it can be encoded again as a body.
func refundDecoder(b []byte) (any, []byte, error) {
	r, fp, err := DecodeRefund("tr_x", b)
	return refundBody{AmountMinor: r.AmountMinor, Description: r.Description, Metadata: r.Metadata}, fp, err
}

func FuzzRefundDecoding(f *testing.F) {
	for _, s := range refundSeeds {
		f.Add([]byte(s), []byte(refundSeeds[1]), uint64(1))
	}
	f.Fuzz(func(t *testing.T, a, b []byte, seed uint64) { checkDecoding(t, refundDecoder, a, b, seed) })
}

func scheduledDecoder(b []byte) (any, []byte, error) {
	req, _, fp, err := DecodeScheduledTransfer(b)
	return req, fp, err
}

func FuzzScheduledTransferDecoding(f *testing.F) {
	for _, s := range scheduledSeeds {
		f.Add([]byte(s), []byte(scheduledSeeds[0]), uint64(1))
	}
	f.Fuzz(func(t *testing.T, a, b []byte, seed uint64) { checkDecoding(t, scheduledDecoder, a, b, seed) })
}

func FuzzAccountDecoding(f *testing.F) {
	for _, s := range accountSeeds {
		f.Add([]byte(s), []byte(accountSeeds[0]), uint64(1))
	}
	f.Fuzz(func(t *testing.T, a, b []byte, seed uint64) { checkDecoding(t, accountDecoder, a, b, seed) })
}

// checkDecoding holds the properties for bodies a and b, and for variants of a made with seed:
//   - same fingerprint if and only if same decoded request;
//   - an accepted body's decoded request, encoded again, decodes to itself with the same fingerprint;
//   - members permuted: the same request; a member name's case changed, or a member given twice
//     (even with the same value): refused.
func checkDecoding(t *testing.T, decode decoder, a, b []byte, seed uint64) {
	reqA, fpA, errA := decode(a)
	reqB, fpB, errB := decode(b)
	if errA == nil && errB == nil && bytes.Equal(fpA, fpB) != reflect.DeepEqual(reqA, reqB) {
		t.Fatalf("fingerprints equal: %v, requests equal: %v\n%s -> %+v\n%s -> %+v", bytes.Equal(fpA, fpB), reflect.DeepEqual(reqA, reqB), a, reqA, b, reqB)
	}
	if errA != nil {
		return
	}
	again, _ := json.Marshal(reqA)
	reqC, fpC, err := decode(again)
	if err != nil || !reflect.DeepEqual(reqC, reqA) || !bytes.Equal(fpC, fpA) {
		t.Fatalf("%s decodes to %+v, encoded again as %s: %+v %v", a, reqA, again, reqC, err)
	}
	members := splitMembers(t, a)
	if len(members) == 0 { // {}: nothing to reorder, rename or repeat
		return
	}
	rng := rand.New(rand.NewPCG(seed, seed>>32))
	shuffled := append([]member(nil), members...)
	rng.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
	if req, fp, err := decode(join(shuffled)); err != nil || !reflect.DeepEqual(req, reqA) || !bytes.Equal(fp, fpA) {
		t.Fatalf("members of %s reordered as %s: %+v %v", a, join(shuffled), req, err)
	}
	i := rng.IntN(len(members))
	if recased := swapCase(members[i].name); recased != members[i].name {
		changed := append([]member(nil), members...)
		changed[i].name = recased
		if _, _, err := decode(join(changed)); err == nil {
			t.Fatalf("member %q renamed %q was accepted: %s", members[i].name, recased, join(changed))
		}
	}
	twice := append(append([]member(nil), members...), members[i])
	if _, _, err := decode(join(twice)); err == nil {
		t.Fatalf("member %q given twice was accepted: %s", members[i].name, join(twice))
	}
}

type member struct {
	name  string
	value json.RawMessage
}

// splitMembers returns the members of an accepted body's top-level object, in order.
func splitMembers(t *testing.T, body []byte) []member {
	dec := json.NewDecoder(bytes.NewReader(body))
	if _, err := dec.Token(); err != nil {
		t.Fatal(err)
	}
	var out []member
	for dec.More() {
		name, err := dec.Token()
		if err != nil {
			t.Fatal(err)
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			t.Fatal(err)
		}
		out = append(out, member{name.(string), v})
	}
	return out
}

func join(members []member) []byte {
	var parts []string
	for _, m := range members {
		name, _ := json.Marshal(m.name)
		parts = append(parts, fmt.Sprintf("%s:%s", name, m.value))
	}
	return []byte("{" + strings.Join(parts, ",") + "}")
}

func swapCase(s string) string {
	return strings.Map(func(r rune) rune {
		if unicode.IsUpper(r) {
			return unicode.ToLower(r)
		}
		return unicode.ToUpper(r)
	}, s)
}

// The case the review found: a second member differing only by case moved 5 where the
// fingerprint had read 100. Both readings now refuse it, and the same for a plain duplicate.
func TestAmbiguousBodiesAreRefused(t *testing.T) {
	for _, body := range transferSeeds[1:4] {
		if req, _, err := DecodeTransfer([]byte(body)); err == nil {
			t.Errorf("%s accepted as %+v", body, req)
		}
	}
	for _, body := range accountSeeds[1:3] {
		if req, _, err := DecodeAccount([]byte(body)); err == nil {
			t.Errorf("%s accepted as %+v", body, req)
		}
	}
	_, fp1, err1 := DecodeTransfer([]byte(transferSeeds[0]))
	_, fp2, err2 := DecodeTransfer([]byte(`{"description":"rent","currency":"USD","amount_minor":100,"to_account_id":"acc_b","from_account_id":"acc_a"}`))
	if err1 != nil || err2 != nil || !bytes.Equal(fp1, fp2) {
		t.Fatalf("the same request reordered: %v %v, same fingerprint %v", err1, err2, bytes.Equal(fp1, fp2))
	}
}

// Metadata within the limits is taken as given; one character or key more is refused, naming
// the field; a value that is not a string (null included) is refused, not read as "".
func TestMetadataLimits(t *testing.T) {
	body := func(m string) []byte {
		return []byte(`{"from_account_id":"acc_a","to_account_id":"acc_b","amount_minor":1,"currency":"USD","metadata":` + m + `}`)
	}
	full := map[string]string{}
	for i := range MaxMetadataKeys {
		full[fmt.Sprintf("k%02d", i)] = strings.Repeat("é", MaxMetadataValue)
	}
	full[strings.Repeat("k", MaxMetadataKey)] = ""
	delete(full, "k00")
	fullJSON, _ := json.Marshal(full)
	req, _, err := DecodeTransfer(body(string(fullJSON)))
	if err != nil || !reflect.DeepEqual(req.Metadata, full) {
		t.Fatalf("metadata at the limits: %v", err)
	}
	for m, field := range map[string]string{
		`{"` + strings.Repeat("k", MaxMetadataKey+1) + `":"v"}`:   "metadata." + strings.Repeat("k", MaxMetadataKey+1),
		`{"k":"` + strings.Repeat("v", MaxMetadataValue+1) + `"}`: "metadata.k",
		`{"":"v"}`:             "metadata",
		`{"k":null}`:           "metadata.k",
		`{"k":1}`:              "metadata.k",
		`{"k":{"nested":"v"}}`: "metadata.k",
		`{"k":"a\u0000b"}`:     "metadata.k",
		`[]`:                   "metadata",
		string(mustJSON(t, func() map[string]string { full["one"] = "more"; return full }())): "metadata",
	} {
		_, _, err := DecodeTransfer(body(m))
		if err == nil || !strings.Contains(fmt.Sprint(problemFields(err)), field) {
			t.Errorf("metadata %.60s: %v, want an error naming %q", m, err, field)
		}
	}
}

func mustJSON(t *testing.T, v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// problemFields lists the fields a refusal names.
func problemFields(err error) []string {
	var p *problem.Problem
	if !errors.As(err, &p) {
		return nil
	}
	var out []string
	for _, f := range p.Errors {
		out = append(out, f.Field)
	}
	return out
}

// A refund's fingerprint covers the transfer it refunds: the same body for another transfer is
// another request.
func TestRefundFingerprintCoversTheTransfer(t *testing.T) {
	_, fp1, err1 := DecodeRefund("tr_a", []byte(`{"amount_minor":5}`))
	_, fp2, err2 := DecodeRefund("tr_b", []byte(`{"amount_minor":5}`))
	_, fp3, err3 := DecodeRefund("tr_a", []byte(`{}`))
	if err1 != nil || err2 != nil || err3 != nil || bytes.Equal(fp1, fp2) || bytes.Equal(fp1, fp3) {
		t.Fatalf("fingerprints: %v %v %v; tr_a = tr_b: %v; 5 = all: %v", err1, err2, err3, bytes.Equal(fp1, fp2), bytes.Equal(fp1, fp3))
	}
}

package bank_test

// ReadEvent verifies the bank's signature over the raw body and decodes that same body: the
// event acted on is the event signed. The fuzz target holds it to an independent reading of the
// signature scheme (docs/contract.md §6, docs/bank.md "Callbacks"); the unit tests pin the
// tolerance window, headers with several v1 values, and malformed headers.

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/payments/payments/internal/bank"
)

var (
	secret = []byte("test-bank-secret")
	now    = time.Unix(1_800_000_000, 0)
	event  = []byte(`{"id":"evt_1","type":"payment.paid","created_at":"2027-01-15T08:00:00Z","data":{"payment_id":"pay_1","reference":"po_1"}}`)
)

// macHex is the spec's signature: hex HMAC-SHA256(secret, "<t>." + body), t as written.
func macHex(key []byte, t string, body []byte) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(t + "."))
	m.Write(body)
	return hex.EncodeToString(m.Sum(nil))
}

// specAccepts is an independent reading of the scheme: a header of comma-separated key=value
// pairs (spaces around a pair allowed, other keys ignored) with exactly one t, a decimal count
// of seconds at most 5 minutes from now either way, and one or more v1, one of which is the
// hex HMAC of the body under t. The MAC is over t's canonical decimal form, as ReadEvent reads
// t as an integer (a t written "+17…" or "017…" is its number).
func specAccepts(key []byte, header string, body []byte, at time.Time) bool {
	var ts []string
	var sigs []string
	for _, part := range strings.Split(header, ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(part), "=") // a bare "t" is a t without a value
		switch k {
		case "t":
			ts = append(ts, v)
		case "v1":
			sigs = append(sigs, strings.ToLower(v))
		}
	}
	if len(ts) != 1 || len(sigs) == 0 || len(key) == 0 {
		return false
	}
	t, err := strconv.ParseInt(ts[0], 10, 64)
	if err != nil {
		return false
	}
	if t < at.Unix()-300 || t > at.Unix()+300 {
		return false
	}
	want := macHex(key, strconv.FormatInt(t, 10), body)
	for _, s := range sigs {
		if s == want {
			return true
		}
	}
	return false
}

func sameEvent(a, b bank.Event) bool {
	return a.ID == b.ID && a.Type == b.Type && a.CreatedAt.Equal(b.CreatedAt) && a.Data == b.Data
}

// probeEvent and probeData have Event's and EventData's member names, each taking any value:
// what encoding/json fills in them from a member is which field it matches that member to,
// however it folds case (an oracle of its matching, not a copy of it).
type probeEvent struct {
	ID        json.RawMessage `json:"id"`
	Type      json.RawMessage `json:"type"`
	CreatedAt json.RawMessage `json:"created_at"`
	Data      json.RawMessage `json:"data"`
}

type probeData struct {
	PaymentID     json.RawMessage `json:"payment_id"`
	Reference     json.RawMessage `json:"reference"`
	Reason        json.RawMessage `json:"reason"`
	AccountNumber json.RawMessage `json:"account_number"`
	AmountMinor   json.RawMessage `json:"amount_minor"`
	Currency      json.RawMessage `json:"currency"`
}

// foldedOntoAField reports whether encoding/json reads a member name, not exactly one of probe's,
// as one of probe's fields.
func foldedOntoAField(name string, probe any) bool {
	key, _ := json.Marshal(name)
	v := reflect.New(reflect.TypeOf(probe))
	if json.Unmarshal([]byte(`{`+string(key)+`:0}`), v.Interface()) != nil {
		return false
	}
	exact := false
	for f := range v.Elem().Type().Fields() {
		exact = exact || f.Tag.Get("json") == name
	}
	return !exact && !v.Elem().IsZero()
}

// ambiguous reports whether body can be read more than one way: some object in it gives a name
// twice, or the event or its data has a member that encoding/json would read as a field of
// another name (a case variant). A lenient reader takes the last, or the folded, member.
func ambiguous(body []byte) bool {
	dec := json.NewDecoder(bytes.NewReader(body))
	var walk func(probe any) bool // reads one value; probe is the type whose members it holds, or nil
	walk = func(probe any) bool {
		tok, err := dec.Token()
		if err != nil {
			return false
		}
		switch tok {
		case json.Delim('['):
			for dec.More() {
				if walk(nil) {
					return true
				}
			}
			_, _ = dec.Token()
		case json.Delim('{'):
			seen := map[string]bool{}
			for dec.More() {
				tok, err := dec.Token()
				if err != nil {
					return false
				}
				name := tok.(string)
				if seen[name] || probe != nil && foldedOntoAField(name, probe) {
					return true
				}
				seen[name] = true
				var inner any
				if _, top := probe.(probeEvent); top && name == "data" {
					inner = probeData{}
				}
				if walk(inner) {
					return true
				}
			}
			_, _ = dec.Token()
		}
		return false
	}
	return walk(probeEvent{})
}

// validKey is the model of an id or a type: 1 to 255 bytes, no control or space character.
func validKey(s string) bool {
	return s != "" && len(s) <= 255 && !strings.ContainsFunc(s, func(r rune) bool { return unicode.IsControl(r) || unicode.IsSpace(r) })
}

// lenient is the model's reading of a body the strict reading accepts: encoding/json's, with each
// NUL of the data's text written as the six characters \u0000 (PostgreSQL stores no NUL).
func lenient(body []byte) (bank.Event, bool) {
	var e bank.Event
	if !utf8.Valid(body) || json.Unmarshal(body, &e) != nil || !validKey(e.ID) || !validKey(e.Type) {
		return e, false
	}
	d := &e.Data
	for _, s := range []*string{&d.PaymentID, &d.Reference, &d.Reason, &d.AccountNumber, &d.Currency} {
		*s = strings.ReplaceAll(*s, "\x00", `\u0000`)
	}
	return e, true
}

// FuzzReadEvent signs a body at some time near now, wraps the signature in fuzzed header text,
// and checks ReadEvent against specAccepts and a model of the decoding. The signature: whenever
// ReadEvent accepts, the header verifies by the spec; a header the spec verifies is never
// refused for its signature; any one byte of the body changed makes it refuse the signature.
// The decoding, differential: a verified body is an event exactly when it is UTF-8, encoding/json
// reads it, it is not ambiguous (ambiguous), and its id and type are valid keys; the event is
// then encoding/json's reading (which, the body being unambiguous, is every reader's), and the
// event the processor records, encoded and read again, is the event it acted on. A verified body
// that is no event is ErrMalformed.
func FuzzReadEvent(f *testing.F) {
	for _, body := range [][]byte{
		event,
		[]byte(`{"id":"evt_2","type":"credit.received","created_at":"2027-01-15T08:00:00+01:00","data":{"account_number":"400000000001","amount_minor":500,"currency":"USD","reference":"x"}}`),
		[]byte(`{"ID":"evt_3","Type":"payment.returned","data":{"Reason":"account_closed"}}`),
		[]byte(`{"id":"a","type":"b","id":"c"}`),
		[]byte(`{"id":"a","type":"b"} trailing`),
		[]byte(`{"id":"","type":"payment.paid"}`),
		[]byte(`not json`),
		[]byte(``),
		[]byte(`{"id":"a","type":"b","data":{"amount_minor":1.5}}`),
		[]byte(`{"id":"a","type":"credit.received","data":{"amount_minor":7,"AMOUNT_MINOR":7000}}`),
		[]byte(`{"id":"a","type":"credit.received","data":{"amount_minor":7,"amount_minor":7000}}`),
		[]byte(`{"id":"a","type":"credit.received","data":{"amount_minor":7,"amount\u005fminor":7000}}`),
		[]byte(`{"id":"a","type":"credit.received","data":{"amount_minor":7,"\u0130d":1,"new_field":{"x":1}}}`),
		[]byte(`{"id":"a","type":"b","\u0130D":"c"}`),
		[]byte(`{"id":"a","type":"b","\u212ad":"c","extra":[{"k":1,"k":2}]}`),
		[]byte(`{"id":"a","type":"credit.received","data":{"reference":"x\u0000y","account_number":"4\u0000"}}`),
		[]byte(`{"id":"a\u0000","type":"b"}`),
		[]byte(`{"id":"a b","type":"b"}`),
		[]byte(`{"id":"a","type":"b","data":null}`),
		[]byte(`{"id":"a","type":"b","created_at":{"x":1}}`),
		[]byte("{\"id\":\"a\",\"type\":\"b\",\"data\":{\"reference\":\"\xff\"}}"),
	} {
		f.Add(body, int64(0), "", "", uint16(0x0100))
		f.Add(body, int64(299), "v1=00,", ",v1=zz", uint16(0x2a07))
		f.Add(body, int64(-301), "", "", uint16(3))
		f.Add(body, int64(12), "t=1,", "", uint16(0xff00))
		f.Add(body, int64(-7), " ", " , x=y", uint16(0x8001))
	}
	f.Fuzz(func(t *testing.T, body []byte, skew int64, prefix, suffix string, flip uint16) {
		signedAt := now.Add(time.Duration(skew%900) * time.Second)
		header := prefix + bank.Sign(secret, signedAt, body) + suffix
		e, err := bank.ReadEvent(secret, header, body, now)
		verifies := specAccepts(secret, header, body, now)
		want, decodes := lenient(body)
		decodes = decodes && !ambiguous(body)
		switch {
		case err == nil && !verifies:
			t.Fatalf("accepted a header the scheme refuses: %q", header)
		case err == nil && (!decodes || !sameEvent(e, want)):
			t.Fatalf("accepted %q as %+v, but the model reads %+v (an event: %v)", body, e, want, decodes)
		case errors.Is(err, bank.ErrSignature) && verifies:
			t.Fatalf("refused a header the scheme verifies: %q: %v", header, err)
		case err != nil && !errors.Is(err, bank.ErrSignature) && (!verifies || decodes || !errors.Is(err, bank.ErrMalformed)):
			t.Fatalf("%q: verified %v, an event by the model %v, but ReadEvent said %v", body, verifies, decodes, err)
		}
		if err == nil {
			recorded, _ := json.Marshal(e)
			again, err := bank.ReadEvent(secret, bank.Sign(secret, now, recorded), recorded, now)
			if err != nil || !sameEvent(again, e) {
				t.Fatalf("the event acted on, %+v, recorded as %s, reads back as %+v (%v)", e, recorded, again, err)
			}
		}
		if len(body) == 0 {
			return
		}
		changed := bytes.Clone(body)
		x := byte(flip >> 8)
		if x == 0 {
			x = 1
		}
		changed[int(flip&0xff)%len(changed)] ^= x
		if _, err := bank.ReadEvent(secret, header, changed, now); !errors.Is(err, bank.ErrSignature) {
			t.Fatalf("a body with one byte changed (%q -> %q) was not refused for its signature: %v", body, changed, err)
		}
	})
}

func TestSignIsTheSpecsHMAC(t *testing.T) {
	got := bank.Sign(secret, now, event)
	want := fmt.Sprintf("t=%d,v1=%s", now.Unix(), macHex(secret, strconv.FormatInt(now.Unix(), 10), event))
	if got != want {
		t.Fatalf("Sign = %s, want %s", got, want)
	}
}

func TestToleranceWindow(t *testing.T) {
	for _, c := range []struct {
		skew time.Duration
		ok   bool
	}{
		{0, true},
		{-bank.Tolerance, true},
		{bank.Tolerance, true},
		{-bank.Tolerance - time.Second, false},
		{bank.Tolerance + time.Second, false},
		{-24 * time.Hour, false},
		{365 * 24 * time.Hour, false},
	} {
		_, err := bank.ReadEvent(secret, bank.Sign(secret, now.Add(c.skew), event), event, now)
		if c.ok != (err == nil) || !c.ok && !errors.Is(err, bank.ErrSignature) {
			t.Errorf("signed %s from now: %v", c.skew, err)
		}
	}
	// Extreme t values do not overflow into the window.
	for _, ts := range []int64{1<<63 - 1, -1 << 63, 0, -now.Unix()} {
		h := fmt.Sprintf("t=%d,v1=%s", ts, macHex(secret, strconv.FormatInt(ts, 10), event))
		if _, err := bank.ReadEvent(secret, h, event, now); !errors.Is(err, bank.ErrSignature) {
			t.Errorf("t=%d: %v", ts, err)
		}
	}
}

func TestSeveralV1Values(t *testing.T) {
	ts := strconv.FormatInt(now.Unix(), 10)
	right := macHex(secret, ts, event)
	old := macHex([]byte("the previous secret"), ts, event)
	for _, c := range []struct {
		header string
		ok     bool
	}{
		{"t=" + ts + ",v1=" + old + ",v1=" + right, true},
		{"t=" + ts + ",v1=" + right + ",v1=" + old, true},
		{"v1=" + right + ",t=" + ts, true},
		{"t=" + ts + ",v1=not-hex,v1=" + right, true},
		{"t=" + ts + ",v1=,v1=" + right, true},
		{"t=" + ts + ", v1=" + right, true},
		{"t=" + ts + ",v1=" + strings.ToUpper(right), true},
		{"t=" + ts + ",v0=" + right + ",v1=" + right + ",scheme=x", true},
		{"t=" + ts + ",v1=" + old, false},
		{"t=" + ts + ",v1=" + old + ",v1=" + macHex([]byte("another"), ts, event), false},
		{"t=" + ts + ",v0=" + right, false},
		{"t=" + ts + ",v2=" + right, false},
		{"t=" + ts + ",v1=" + right[:62], false},
		{"t=" + ts + ",v1=" + right + "00", false},
		{"t=" + ts + ",v1=" + macHex(secret, ts, append(bytes.Clone(event), ' ')), false},
	} {
		_, err := bank.ReadEvent(secret, c.header, event, now)
		if c.ok != (err == nil) || !c.ok && !errors.Is(err, bank.ErrSignature) {
			t.Errorf("%q: %v", c.header, err)
		}
	}
}

func TestMalformedHeaders(t *testing.T) {
	ts := strconv.FormatInt(now.Unix(), 10)
	right := macHex(secret, ts, event)
	for _, h := range []string{
		"",
		",",
		"t",
		"t=",
		"v1=" + right,
		"t=" + ts,
		"t=" + ts + ",v1",
		"t=" + ts + ";v1=" + right,
		"t=" + ts + ",t=" + ts + ",v1=" + right,
		"t=" + ts + ".0,v1=" + right,
		"t=x" + ts + ",v1=" + right,
		"t =" + ts + ",v1=" + right,
		"T=" + ts + ",v1=" + right,
		"t=" + ts + ",V1=" + right,
		"t=" + ts + " v1=" + right,
		strings.Repeat("t=1,", 1000) + "v1=" + right,
	} {
		if _, err := bank.ReadEvent(secret, h, event, now); !errors.Is(err, bank.ErrSignature) {
			t.Errorf("%q: %v, want ErrSignature", h, err)
		}
	}
	// No secret configured: nothing verifies.
	if _, err := bank.ReadEvent(nil, bank.Sign(nil, now, event), event, now); !errors.Is(err, bank.ErrSignature) {
		t.Errorf("empty secret: %v", err)
	}
}

// A body signed right that is no event is told apart from a bad signature: the API answers it
// 200 (the bank would resend it for ever), keeps it with the reason, and acts on nothing. The
// reason is storable text.
func TestSignedButNotAnEvent(t *testing.T) {
	for _, body := range []string{`not json`, `{"id":"","type":"payment.paid"}`, `{"id":"evt_1"}`, `[]`, `null`,
		`{"id":"a","type":"b","data":{"amount_minor":"5"}}`, `{"id":"a\u0000","type":"b"}`, `{"id":"a b","type":"b"}`,
		`{"id":"a","type":"b\n"}`, `{"id":"a","type":"b","data":{"amount_minor":7,"AMOUNT_MINOR":7000}}`,
		`{"id":"a","type":"b","data":{"amount_minor":7,"amount_minor":7000}}`, `{"id":"a","type":"b","\u0000":1,"\u0000":2}`,
		`{"id":"` + strings.Repeat("x", 256) + `","type":"b"}`} {
		_, err := bank.ReadEvent(secret, bank.Sign(secret, now, []byte(body)), []byte(body), now)
		var bad *bank.Malformed
		if !errors.Is(err, bank.ErrMalformed) || !errors.As(err, &bad) || strings.ContainsRune(bad.Reason, 0) || bad.Reason == "" {
			t.Errorf("%s: %v, want ErrMalformed with a storable reason", body, err)
		}
	}
	e, err := bank.ReadEvent(secret, bank.Sign(secret, now, event), event, now)
	if err != nil || e.ID != "evt_1" || e.Type != bank.PaymentPaid || e.Data.PaymentID != "pay_1" || e.Data.Reference != "po_1" ||
		!e.CreatedAt.Equal(time.Date(2027, 1, 15, 8, 0, 0, 0, time.UTC)) {
		t.Fatalf("%+v %v", e, err)
	}
}

package idempotency

import (
	"strings"
	"testing"
)

func TestParseKey(t *testing.T) {
	cases := []struct {
		values []string
		want   string
		err    error
	}{
		{nil, "", ErrMissing},
		{[]string{"abc"}, "abc", nil},
		{[]string{`"abc"`}, "abc", nil},
		{[]string{`"a\"b"`}, `a"b`, nil},
		{[]string{`"a\\b"`}, `a\b`, nil},
		{[]string{`"a\b"`}, "", ErrInvalid},
		{[]string{`"a"b"`}, "", ErrInvalid},
		{[]string{`""`}, "", ErrInvalid},
		{[]string{""}, "", ErrInvalid},
		{[]string{"a b"}, "", ErrInvalid},
		{[]string{"é"}, "", ErrInvalid},
		{[]string{"a\x7f"}, "", ErrInvalid},
		{[]string{strings.Repeat("k", 255)}, strings.Repeat("k", 255), nil},
		{[]string{strings.Repeat("k", 256)}, "", ErrInvalid},
		{[]string{"a", "a"}, "", ErrInvalid},
		{[]string{" padded "}, "padded", nil},
		{[]string{"\tpadded\t"}, "padded", nil},
		// Only HTTP's own whitespace is stripped: a no-break space (or any other Unicode space)
		// is a character outside visible ASCII.
		{[]string{"order-1\u00a0"}, "", ErrInvalid},
		{[]string{"\u00a0order-1"}, "", ErrInvalid},
		{[]string{"order-1\u2003"}, "", ErrInvalid},
		{[]string{"order-1\n"}, "", ErrInvalid},
	}
	for _, c := range cases {
		got, err := ParseKey(c.values)
		if got != c.want || err != c.err {
			t.Errorf("ParseKey(%q) = %q, %v; want %q, %v", c.values, got, err, c.want, c.err)
		}
	}
}

func TestScopeIdentifiers(t *testing.T) {
	a := Scope{OwnerID: "own_1", Route: RouteTransfers, Key: "order-7"}
	if got := a.WorkflowID(); got != "transfer/own_1/order-7" {
		t.Fatalf("workflow id %q", got)
	}
	b := a
	b.Route = RouteDeposit
	if got := b.WorkflowID(); got != "deposit/own_1/order-7" {
		t.Fatalf("deposit workflow id %q", got)
	}
	for _, sc := range []Scope{a, b, {OwnerID: "own_1", Route: RouteTransfers, Key: "a/b"}} {
		if got, ok := ScopeOf(sc.WorkflowID()); !ok || got != sc {
			t.Fatalf("ScopeOf(%q) = %+v, %v", sc.WorkflowID(), got, ok)
		}
	}
	for _, id := range []string{"", "transfer/", "transfer/own_1", "transfer/own_1/", "wf/x/y", "idempotency-cleanup"} {
		if _, ok := ScopeOf(id); ok {
			t.Fatalf("ScopeOf(%q) found a scope", id)
		}
	}
	c := a
	c.OwnerID = "own_2"
	ids := map[string]bool{a.TransferID(0): true, a.TransferID(1): true, b.TransferID(0): true, c.TransferID(0): true}
	if len(ids) != 4 || a.TransferID(0) != a.TransferID(0) {
		t.Fatalf("transfer ids must be a pure, injective-in-practice function of scope and use: %v", ids)
	}
	if id := a.TransferID(0); !strings.HasPrefix(id, "tr_") || len(id) != 27 {
		t.Fatalf("transfer id %q", id)
	}
}

func TestCanonicalIgnoresOrderAndSpacingOnly(t *testing.T) {
	x, _ := Canonical([]byte(`{"b": 1, "a": {"d": [1, 2], "c": "<x>"}}`))
	y, _ := Canonical([]byte(`{"a":{"c":"<x>","d":[1,2]},"b":1}`))
	if string(x) != string(y) || string(x) != `{"a":{"c":"<x>","d":[1,2]},"b":1}` {
		t.Fatalf("%s vs %s", x, y)
	}
	z, _ := Canonical([]byte(`{"a":{"c":"<x>","d":[2,1]},"b":1}`))
	if string(z) == string(x) {
		t.Fatal("array order is a value and must count")
	}
	if _, err := Canonical([]byte(`{"a":1} {"b":2}`)); err == nil {
		t.Fatal("trailing data must be rejected")
	}
}

// A workflow ID never exceeds what Temporal stores on SQL, whatever the key's length; keys that
// differ only after the cut still get IDs of their own; and a long key's ID gives its scope back
// without the key, for Resolve to complete.
func TestLongKeysFitInAWorkflowID(t *testing.T) {
	long := strings.Repeat("k", MaxKeyLength)
	seen := map[string]Scope{}
	for _, sc := range []Scope{
		{OwnerID: "own_0123456789abcdef01234567", Route: RouteTransfers, Key: long},
		{OwnerID: "own_0123456789abcdef01234567", Route: RouteTransfers, Key: long[:MaxKeyLength-1] + "x"},
		{OwnerID: "own_0123456789abcdef01234567", Route: RoutePayouts, Key: long},
		{OwnerID: "own_0123456789abcdef01234568", Route: RouteTransfers, Key: long},
		{Route: RoutePayin, Key: strings.Repeat("e", 300)},
	} {
		id := sc.WorkflowID()
		if len(id) > MaxWorkflowID {
			t.Fatalf("%d-byte workflow ID %q", len(id), id)
		}
		if other, dup := seen[id]; dup {
			t.Fatalf("scopes %+v and %+v share workflow ID %q", other, sc, id)
		}
		seen[id] = sc
		got, ok := ScopeOf(id)
		want := sc
		want.Key = ""
		if !ok || got != want {
			t.Fatalf("ScopeOf(%q) = %+v, %v; want %+v", id, got, ok, want)
		}
	}
	// The longest key that fits stays whole, and its scope comes back with it.
	fits := Scope{OwnerID: "own_1", Route: RouteTransfers, Key: strings.Repeat("k", MaxWorkflowID-len("transfer/own_1/"))}
	if got, ok := ScopeOf(fits.WorkflowID()); !ok || got != fits || !strings.HasSuffix(fits.WorkflowID(), fits.Key) {
		t.Fatalf("ScopeOf(%q) = %+v, %v", fits.WorkflowID(), got, ok)
	}
}

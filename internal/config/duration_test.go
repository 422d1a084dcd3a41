package config

import (
	"encoding/json"
	"testing"
	"time"
)

// Durations read well in the Temporal UI, and inputs recorded before as nanoseconds still decode.
func TestDurationReadsBothForms(t *testing.T) {
	type input struct{ ReplayFor, RetryFor Duration }
	out, _ := json.Marshal(input{ReplayFor: Duration(24 * time.Hour), RetryFor: Duration(2 * time.Minute)})
	var shown struct{ ReplayFor, RetryFor string }
	if err := json.Unmarshal(out, &shown); err != nil || shown.ReplayFor != "24h0m0s" || shown.RetryFor != "2m0s" {
		t.Fatalf("durations written as %s", out)
	}
	var back input
	if err := json.Unmarshal(out, &back); err != nil || back.ReplayFor != Duration(24*time.Hour) {
		t.Fatalf("round trip: %+v %v", back, err)
	}
	var old input
	if err := json.Unmarshal([]byte(`{"ReplayFor":86400000000000,"RetryFor":120000000000}`), &old); err != nil ||
		time.Duration(old.ReplayFor) != 24*time.Hour || time.Duration(old.RetryFor) != 2*time.Minute {
		t.Fatalf("nanoseconds of an old history: %+v %v", old, err)
	}
	if err := json.Unmarshal([]byte(`{"RetryFor":true}`), &old); err == nil {
		t.Fatal("a boolean is no duration")
	}
}

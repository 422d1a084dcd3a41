package config

import (
	"encoding/json"
	"errors"
	"time"
)

// Duration is a time.Duration that reads well in Temporal's UI: "24h0m0s", not 86400000000000.
// It reads both forms, so older histories still decode. A worker built before this type reads
// numbers only, so once runs start with strings a deploy is rolled forward, not back past it.
type Duration time.Duration

// MarshalJSON writes d as time.Duration's String form.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// UnmarshalJSON reads a duration string ("2m0s") or a count of nanoseconds.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		v, err := time.ParseDuration(s)
		*d = Duration(v)
		return err
	}
	var ns int64
	if err := json.Unmarshal(b, &ns); err != nil {
		return errors.New("a duration must be a string such as \"2m0s\" or a number of nanoseconds")
	}
	*d = Duration(ns)
	return nil
}

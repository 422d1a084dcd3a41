package banksim

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"
)

// Faults are the simulator's knobs (docs/bank.md, "The simulator"). They are set by flags at
// start and changed at run time by POST /admin/faults.
type Faults struct {
	Latency           time.Duration // added to every answer of the rail API
	ErrorRate         float64       // share of instructions answered 503 before anything happens
	LostAnswerRate    float64       // share of instructions made and then left without an answer
	SettleAfter       time.Duration // from an instruction to paid or failed
	FailRate          float64       // share of payments that fail
	ReturnRate        float64       // share of paid payments returned
	ReturnAfter       time.Duration // from paid to returned
	CallbackDropRate  float64       // share of events never sent
	CallbackDupRate   float64       // share of events sent twice
	CallbackDelay     time.Duration // each event is sent after a random delay up to this
	CallbackRetryBase time.Duration // first wait between attempts of a callback; doubles each time
	DownFor           time.Duration // the rail answers 503 for this long from the start (or from the change)
}

// DefaultFaults is a well-behaved bank: no injected faults, payments settle after 2s, and a
// callback is retried after 1s, 2s, 4s… (`make run` adds its own faults on top).
func DefaultFaults() Faults {
	return Faults{SettleAfter: 2 * time.Second, ReturnAfter: 72 * time.Hour, CallbackRetryBase: time.Second}
}

// knob is one field of Faults: its snake_case name (the JSON name; the flag is the same with
// dashes), its help, and a pointer to either a duration or a rate.
type knob struct {
	name string
	help string
	dur  *time.Duration
	rate *float64
}

// knobs lists the fields of f in one place, for flags, JSON and validation alike.
func (f *Faults) knobs() []knob {
	return []knob{
		{name: "latency", help: "added to every answer of the rail API", dur: &f.Latency},
		{name: "error_rate", help: "share of instructions answered 503 before anything happens", rate: &f.ErrorRate},
		{name: "lost_answer_rate", help: "share of instructions made and then left without an answer", rate: &f.LostAnswerRate},
		{name: "settle_after", help: "time from an instruction to paid or failed", dur: &f.SettleAfter},
		{name: "fail_rate", help: "share of payments that fail", rate: &f.FailRate},
		{name: "return_rate", help: "share of paid payments returned", rate: &f.ReturnRate},
		{name: "return_after", help: "time from paid to returned", dur: &f.ReturnAfter},
		{name: "callback_drop_rate", help: "share of events never sent", rate: &f.CallbackDropRate},
		{name: "callback_dup_rate", help: "share of events sent twice", rate: &f.CallbackDupRate},
		{name: "callback_delay", help: "each event is sent after a random delay up to this", dur: &f.CallbackDelay},
		{name: "callback_retry_base", help: "first wait before a callback is sent again; doubles each attempt", dur: &f.CallbackRetryBase},
		{name: "down_for", help: "the rail answers 503 to everything for this long from the start", dur: &f.DownFor},
	}
}

// RegisterFlags defines one flag per knob (--error-rate for error_rate), bound to f.
func (f *Faults) RegisterFlags(fs *flag.FlagSet) {
	for _, k := range f.knobs() {
		name := strings.ReplaceAll(k.name, "_", "-")
		if k.dur != nil {
			fs.DurationVar(k.dur, name, *k.dur, k.help)
		} else {
			fs.Float64Var(k.rate, name, *k.rate, k.help)
		}
	}
}

// Validate refuses a rate outside [0, 1] or a negative duration, naming the knob.
func (f *Faults) Validate() error {
	for _, k := range f.knobs() {
		switch {
		case k.dur != nil && *k.dur < 0:
			return fmt.Errorf("%s: must not be negative", k.name)
		case k.rate != nil && !(*k.rate >= 0 && *k.rate <= 1): // also refuses NaN
			return fmt.Errorf("%s: must be between 0 and 1", k.name)
		}
	}
	return nil
}

// MarshalJSON writes every knob, durations as Go duration strings ("1.5s").
func (f Faults) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, k := range f.knobs() {
		if i > 0 {
			b.WriteByte(',')
		}
		var v any = k.rate
		if k.dur != nil {
			v = k.dur.String()
		}
		val, err := json.Marshal(v)
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(&b, "%q:%s", k.name, val)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// patch applies a partial update (any of the knobs, by JSON name) to a copy of f. An unknown
// knob, a value of the wrong type or out of range refuses the whole update.
func (f Faults) patch(body []byte) (Faults, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(body, &fields); err != nil {
		return f, fmt.Errorf("body is not a JSON object: %v", err)
	}
	knobs := map[string]knob{}
	for _, k := range f.knobs() {
		knobs[k.name] = k
	}
	for name, raw := range fields {
		k, ok := knobs[name]
		if !ok {
			return f, fmt.Errorf("unknown knob %q", name)
		}
		if k.rate != nil {
			if err := json.Unmarshal(raw, k.rate); err != nil {
				return f, fmt.Errorf("%s: want a number between 0 and 1", name)
			}
			continue
		}
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return f, fmt.Errorf("%s: want a Go duration string such as \"250ms\"", name)
		}
		d, err := time.ParseDuration(s)
		if err != nil {
			return f, fmt.Errorf("%s: %v", name, err)
		}
		*k.dur = d
	}
	return f, f.Validate()
}

// dice are the simulator's random choices, all from one seeded PCG source so that a run can be
// repeated (--seed). Handlers and timers share it, hence the mutex.
type dice struct {
	mu sync.Mutex
	r  *rand.Rand
}

func newDice(seed uint64) *dice {
	return &dice{r: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
}

// chance reports true with probability p; 0 and 1 are certain and draw nothing.
func (d *dice) chance(p float64) bool {
	if p <= 0 {
		return false
	}
	if p >= 1 {
		return true
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.r.Float64() < p
}

// upTo is a uniform duration in [0, max].
func (d *dice) upTo(max time.Duration) time.Duration {
	if max <= 0 {
		return 0
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return time.Duration(d.r.Int64N(int64(max) + 1))
}

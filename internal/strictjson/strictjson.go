// Package strictjson decodes a JSON object that has exactly one reading. encoding/json matches
// names regardless of case and lets the last of two equal names win: `{"amount_minor":7,
// "AMOUNT_MINOR":7000}` would be 7,000 to it and 7 to another reader. Decode checks the names
// first (each once, after unescaping; none folding onto another field), then decodes the values.
package strictjson

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"reflect"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Kind is what made a body refused.
type Kind int

// Kinds of Error.
const (
	NotObject   Kind = iota // empty, or a JSON value other than an object
	NotUTF8                 // not UTF-8
	Syntax                  // not valid JSON (Err says where)
	Trailing                // more after the object
	Duplicate               // Field given more than once in its object
	Unknown                 // Field is no field of dst (Known: the field it is in another case, if any)
	CaseVariant             // with IgnoreUnknown: Field names Known in another case
	WrongType               // Field's value is not of its type (Message says which; Err from encoding/json)
)

// Error is why Decode refused a body.
type Error struct {
	Kind    Kind
	Field   string // the member's path, "data.amount_minor"; "" for the body as a whole
	Known   string // Unknown, CaseVariant: dst's field whose name Field is in another case
	Message string // WrongType: what the value must be, when known before decoding
	Err     error  // Syntax, WrongType: encoding/json's error
}

func (e *Error) Error() string {
	switch e.Kind {
	case NotObject:
		return "not a JSON object"
	case NotUTF8:
		return "not UTF-8"
	case Syntax:
		return "not valid JSON: " + e.Err.Error()
	case Trailing:
		return "more than one JSON value"
	case Duplicate:
		return fmt.Sprintf("member %q given more than once", e.Field)
	case Unknown:
		return fmt.Sprintf("unknown member %q", e.Field)
	case CaseVariant:
		return fmt.Sprintf("member %q is %q in another case", e.Field, e.Known)
	}
	if e.Message != "" {
		return fmt.Sprintf("member %q %s", e.Field, e.Message)
	}
	return "a value of the wrong type: " + e.Err.Error()
}

func (e *Error) Unwrap() error { return e.Err }

// Options change what Decode accepts.
type Options struct {
	// IgnoreUnknown skips members dst has no field for (a sender may add some), except a name
	// that encoding/json would fold onto one of dst's fields: that is a CaseVariant.
	IgnoreUnknown bool
}

// Decode reads body, one JSON object in UTF-8, into dst, a pointer to a struct: each member name
// exactly one of dst's fields (case-sensitive), none given twice in any object, each value of its
// field's type (a map[string]string takes strings only). Every refusal is an *Error.
func Decode(body []byte, dst any, opt Options) error {
	if len(bytes.TrimSpace(body)) == 0 {
		return &Error{Kind: NotObject}
	}
	if !utf8.Valid(body) {
		return &Error{Kind: NotUTF8}
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return &Error{Kind: NotObject}
	}
	c := checker{dec: dec, opt: opt}
	if err := c.members(reflect.TypeOf(dst).Elem(), ""); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return &Error{Kind: Trailing}
	}
	// The names are known to be exact and unique: decode the values.
	dec = json.NewDecoder(bytes.NewReader(body))
	if !opt.IgnoreUnknown {
		dec.DisallowUnknownFields()
	}
	if err := dec.Decode(dst); err != nil {
		field := ""
		if typeErr, ok := err.(*json.UnmarshalTypeError); ok {
			field = typeErr.Field
		}
		return &Error{Kind: WrongType, Field: field, Err: err}
	}
	return nil
}

type checker struct {
	dec *json.Decoder
	opt Options
}

// members reads the rest of an object whose '{' was just read, checking its member names against
// t (a struct's json names, a map's any, anything for another type) and its nested values. path
// is the object's place in the body ("data."), for naming a field in an error.
func (c checker) members(t reflect.Type, path string) error {
	fields := jsonFields(t)
	seen := map[string]bool{}
	for c.dec.More() {
		tok, err := c.dec.Token()
		if err != nil {
			return syntax(err)
		}
		name := tok.(string) // object keys are always strings
		if seen[name] {
			return &Error{Kind: Duplicate, Field: path + name}
		}
		seen[name] = true
		var elem reflect.Type
		switch {
		case fields != nil:
			var ok bool
			if elem, ok = fields[name]; !ok {
				known := sameFolded(name, fields)
				if !c.opt.IgnoreUnknown {
					return &Error{Kind: Unknown, Field: path + name, Known: known}
				}
				if known != "" {
					return &Error{Kind: CaseVariant, Field: path + name, Known: known}
				}
				// elem nil: any value, still checked for duplicate names
			}
		case t != nil && t.Kind() == reflect.Map && t.Elem().Kind() == reflect.String:
			// encoding/json would take null for "": a map's value is a string or it is refused.
			if tok, err := c.dec.Token(); err != nil {
				return syntax(err)
			} else if _, ok := tok.(string); !ok {
				return &Error{Kind: WrongType, Field: path + name, Message: "must be a JSON string"}
			}
			continue
		case t != nil && t.Kind() == reflect.Map:
			elem = t.Elem()
		}
		if err := c.value(elem, path+name+"."); err != nil {
			return err
		}
	}
	_, err := c.dec.Token() // '}'
	return syntax(err)
}

// value reads one value at path, checking the member names of any object in it against t.
func (c checker) value(t reflect.Type, path string) error {
	tok, err := c.dec.Token()
	if err != nil {
		return syntax(err)
	}
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch tok {
	case json.Delim('{'):
		return c.members(t, path)
	case json.Delim('['):
		var elem reflect.Type
		if t != nil && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) {
			elem = t.Elem()
		}
		for c.dec.More() {
			if err := c.value(elem, path); err != nil {
				return err
			}
		}
		_, err := c.dec.Token() // ']'
		return syntax(err)
	}
	return nil
}

var unmarshaler = reflect.TypeFor[json.Unmarshaler]()

// jsonFields maps the JSON names of struct t's fields to their types; nil when t is no struct or
// has its own UnmarshalJSON.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	if t == nil || t.Kind() != reflect.Struct || reflect.PointerTo(t).Implements(unmarshaler) {
		return nil
	}
	out := map[string]reflect.Type{}
	for f := range t.Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" || !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out[name] = f.Type
	}
	return out
}

// sameFolded returns the field encoding/json would fill from a member name (case folded), or "".
func sameFolded(name string, fields map[string]reflect.Type) string {
	folded := fold(name)
	for known := range fields {
		if fold(known) == folded {
			return known
		}
	}
	return ""
}

// fold is encoding/json's case folding of a member name (its foldName): each rune the smallest
// of its simple case folding orbit, so that "k", "K" and the Kelvin sign fold alike.
func fold(s string) string {
	var b strings.Builder
	for _, r := range s {
		for {
			next := unicode.SimpleFold(r)
			if next <= r {
				r = next
				break
			}
			r = next
		}
		b.WriteRune(r)
	}
	return b.String()
}

func syntax(err error) error {
	if err == nil {
		return nil
	}
	return &Error{Kind: Syntax, Err: err}
}

// Package outage marks the errors that mean a dependency could not be reached or do the work just
// now: the same request may succeed later, and nothing else deserves a "retry later" answer.
package outage

import "errors"

// Error is a dependency that could not be reached or did not answer in time.
type Error struct {
	Dependency string // "PostgreSQL", "Temporal"
	Err        error
}

func (e *Error) Error() string { return e.Dependency + " is unavailable: " + e.Err.Error() }

func (e *Error) Unwrap() error { return e.Err }

// Of marks err as an outage of dependency.
func Of(dependency string, err error) error { return &Error{Dependency: dependency, Err: err} }

// As returns the outage err is or wraps, if any.
func As(err error) (*Error, bool) {
	var e *Error
	ok := errors.As(err, &e)
	return e, ok
}

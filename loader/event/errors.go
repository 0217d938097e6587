package event

import (
	"errors"
	"strconv"
)

// ErrMalformed is matched by every error that Decode and DecodeHeader return:
// errors.Is(err, ErrMalformed) tells a bad record from other failures.
var ErrMalformed = errors.New("malformed event record")

// ShortError is returned for a record shorter than its layout.
type ShortError struct {
	// Kind is the record's kind, or 0 when even the header was short.
	Kind Kind
	Need int // bytes the layout needs
	Got  int // bytes the record has
}

func (e *ShortError) Error() string {
	what := "record header"
	if e.Kind != 0 {
		what = e.Kind.String() + " record"
	}
	return "decode " + what + ": " + strconv.Itoa(e.Got) + " bytes, need " + strconv.Itoa(e.Need)
}

// Is reports whether target is ErrMalformed.
func (e *ShortError) Is(target error) bool { return target == ErrMalformed }

// UnknownKindError is returned for a kind this package does not know,
// usually a BPF object newer than the decoder.
type UnknownKindError struct {
	Kind Kind
}

func (e *UnknownKindError) Error() string {
	return "decode record: unknown kind " + strconv.FormatUint(uint64(e.Kind), 10)
}

// Is reports whether target is ErrMalformed or errors.ErrUnsupported.
func (e *UnknownKindError) Is(target error) bool {
	return target == ErrMalformed || target == errors.ErrUnsupported
}

// VersionError is returned for a known kind whose layout version is not the
// one this package decodes.
type VersionError struct {
	Kind Kind
	Got  uint8 // the version in the record
	Want uint8 // the version this package decodes
}

func (e *VersionError) Error() string {
	return "decode " + e.Kind.String() + " record: version " +
		strconv.FormatUint(uint64(e.Got), 10) + ", want " + strconv.FormatUint(uint64(e.Want), 10)
}

// Is reports whether target is ErrMalformed or errors.ErrUnsupported.
func (e *VersionError) Is(target error) bool {
	return target == ErrMalformed || target == errors.ErrUnsupported
}

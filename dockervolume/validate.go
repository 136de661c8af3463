package dockervolume

import (
	"errors"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/plugvisor/plugvisor/errclass"
	"github.com/plugvisor/plugvisor/names"
)

// Limits on what callers of the volume service may send.
const (
	// MaxVolumeNameLen is the longest volume name, in bytes.
	MaxVolumeNameLen = 255
	// MaxMountIDLen is the longest mount ID, in bytes (Docker's are 64 hex digits).
	MaxMountIDLen = 128
	// MaxOptions is the most driver options one volume may carry.
	MaxOptions = 64
	// MaxOptionKeyLen and MaxOptionValueLen bound one driver option.
	MaxOptionKeyLen   = 256
	MaxOptionValueLen = 4096
)

// ErrInvalidVolume: a volume name, mount ID, driver name or option was
// refused before anything was sent or written.
var ErrInvalidVolume = errclass.New(errclass.Invalid, "invalid volume request")

// ValidateVolumeName reports why name cannot name a Docker volume, nil when
// it can. The rule is the one dockerd's local driver applies to every name
// ([a-zA-Z0-9][a-zA-Z0-9_.-]+, so ".", ".." and separators never pass),
// with a length limit, on top of the shared validation of names.Check,
// whose words explain a dot, a climb out or a hidden character or a separator best. It is
// the one check of volume names in this package and in the reference
// plugin.
func ValidateVolumeName(name string) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: volume name %q "+format, append([]any{ErrInvalidVolume, name}, args...)...)
	}
	shared := func() error {
		if err := names.Check("volume name", name); err != nil {
			return fmt.Errorf("%w: %w", ErrInvalidVolume, err)
		}
		return nil
	}
	switch {
	case name == "":
		return fmt.Errorf("%w: volume name must not be empty", ErrInvalidVolume)
	case len(name) > MaxVolumeNameLen:
		return fmt.Errorf("%w: volume name is %d bytes, over the limit of %d", ErrInvalidVolume, len(name), MaxVolumeNameLen)
	case !isAlnum(rune(name[0])):
		if err := shared(); err != nil {
			return err
		}
		return bad("must start with a letter or digit")
	case len(name) < 2:
		return bad("is too short: use at least 2 characters, as Docker does")
	}
	for _, r := range name {
		if r >= utf8.RuneSelf || r == '/' || r == '\\' {
			if err := shared(); err != nil {
				return err
			}
		}
		if !isAlnum(r) && r != '_' && r != '.' && r != '-' {
			return bad("holds %q: use only letters, digits, '_', '.' and '-'", r)
		}
	}
	return nil
}

func isAlnum(r rune) bool {
	return r < utf8.RuneSelf && (r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9')
}

// ValidateMountID reports why id cannot be a mount ID (the caller's name
// for one use of a volume, Docker's container mount ID), nil when it can.
func ValidateMountID(id string) error {
	return validateWord("mount ID", id, MaxMountIDLen)
}

// validateWord checks a printable, separator-free identifier of at most max bytes.
func validateWord(field, v string, max int) error {
	switch {
	case v == "":
		return fmt.Errorf("%w: %s must not be empty", ErrInvalidVolume, field)
	case len(v) > max:
		return fmt.Errorf("%w: %s is %d bytes, over the limit of %d", ErrInvalidVolume, field, len(v), max)
	case !utf8.ValidString(v):
		return fmt.Errorf("%w: %s is not UTF-8", ErrInvalidVolume, field)
	case v == "." || v == "..":
		return fmt.Errorf("%w: %s must not be %q", ErrInvalidVolume, field, v)
	case strings.ContainsAny(v, `/\`):
		return fmt.Errorf("%w: %s %q must not hold a path separator", ErrInvalidVolume, field, v)
	case strings.ContainsFunc(v, func(r rune) bool { return !unicode.IsPrint(r) || unicode.IsSpace(r) }):
		return fmt.Errorf("%w: %s %q must not hold spaces or control characters", ErrInvalidVolume, field, v)
	}
	return nil
}

// ValidateOptions reports every problem with a volume's driver options.
func ValidateOptions(opts map[string]string) error {
	if len(opts) > MaxOptions {
		return fmt.Errorf("%w: %d driver options, over the limit of %d", ErrInvalidVolume, len(opts), MaxOptions)
	}
	var problems []error
	for k, v := range opts {
		if err := validateWord("driver option key", k, MaxOptionKeyLen); err != nil {
			problems = append(problems, err)
		}
		switch {
		case len(v) > MaxOptionValueLen:
			problems = append(problems, fmt.Errorf("%w: driver option %q is %d bytes, over the limit of %d",
				ErrInvalidVolume, k, len(v), MaxOptionValueLen))
		case !utf8.ValidString(v) || strings.ContainsFunc(v, unicode.IsControl):
			problems = append(problems, fmt.Errorf("%w: driver option %q must be UTF-8 without control characters",
				ErrInvalidVolume, k))
		}
	}
	return errors.Join(problems...)
}

// ValidateDriver reports why name cannot name a volume driver (a plugin),
// nil when it can.
func ValidateDriver(name string) error {
	return validateWord("driver", name, MaxVolumeNameLen)
}

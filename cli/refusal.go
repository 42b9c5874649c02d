package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	touba "github.com/touba/touba-trigger"
)

// Exit codes of SPEC §3.
const (
	ExitOK      = 0
	ExitRuntime = 1
	ExitUsage   = 2
	ExitLocked  = 3
)

// UsageError marks bad usage or configuration: exit 2, code UsageInvalid
// unless Err carries its own (ConfigInvalid). Usage, when set, is printed
// after the refusal.
type UsageError struct {
	Err   error
	Usage string
}

func (e UsageError) Error() string { return e.Err.Error() }
func (e UsageError) Unwrap() error { return e.Err }

// Usagef is a UsageError with a message and no usage after it.
func Usagef(format string, args ...any) error {
	return UsageError{Err: fmt.Errorf(format, args...)}
}

// Noted is an error with a note printed after its refusal line (and any
// usage), so the line still starts with the code.
type Noted struct {
	Err  error
	Note string
}

func (e Noted) Error() string { return e.Err.Error() }
func (e Noted) Unwrap() error { return e.Err }

// ExitCode prints err as a refusal and returns the exit code of SPEC §3.
func ExitCode(err error, stderr io.Writer) int {
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return ExitOK
	}
	code, msg := Refusal(err)
	fmt.Fprintln(stderr, code+": "+msg)
	var ue UsageError
	if errors.As(err, &ue) && ue.Usage != "" {
		fmt.Fprint(stderr, ue.Usage)
	}
	var n Noted
	if errors.As(err, &n) && n.Note != "" {
		fmt.Fprintln(stderr, n.Note)
	}
	switch {
	case code == touba.EJournalLocked || code == touba.EJournalLockStale:
		return ExitLocked
	case errors.As(err, &ue), code == touba.EUsage, code == touba.ECONFIG, code == touba.EProgramInvalid, code == touba.EEffectJournalRequired,
		code == touba.EConsoleTokenRequired, code == touba.ENetworkIsolationUnavailable, code == touba.ENodeIdInUse,
		code == touba.ESchemaTooNew:
		return ExitUsage
	}
	return ExitRuntime
}

// Refusal returns the public code of err and its message: every refusal
// the CLI or serve prints starts with "Code: " (SPEC §3), so scripts can
// match on it. An error without a code is a usage error (UsageInvalid) or
// a runtime failure (Internal).
func Refusal(err error) (code, msg string) {
	msg = err.Error()
	var te *touba.Error
	var ue UsageError
	switch {
	case errors.As(err, &te):
		code = te.Code
		// A wrapped *touba.Error renders as "touba error: code=...
		// message=..."; the code leads the line already.
		msg = strings.Replace(msg, te.Error(), te.Message, 1)
	case errors.As(err, &ue):
		code = touba.EUsage
	default:
		code = touba.EINTERNAL
	}
	return code, strings.TrimPrefix(msg, code+": ")
}

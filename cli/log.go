package cli

import (
	"io"
	"time"

	"github.com/rs/zerolog"
)

// NewLogger is serve's logger at --log-level in --log-format (json, or
// console with colours on a terminal), with millisecond UTC timestamps.
func NewLogger(level, format string, w io.Writer) (zerolog.Logger, error) {
	lvl, err := zerolog.ParseLevel(level)
	if err != nil || level == "" {
		return zerolog.Nop(), Usagef("--log-level %q: want debug, info, warn or error", level)
	}
	switch format {
	case "json":
	case "console":
		w = zerolog.ConsoleWriter{Out: w, TimeFormat: time.RFC3339, NoColor: !IsTerminal(w)}
	default:
		return zerolog.Nop(), Usagef("--log-format %q: want json or console", format)
	}
	zerolog.TimeFieldFormat = "2006-01-02T15:04:05.000Z07:00"
	return zerolog.New(w).Level(lvl).With().Timestamp().Logger(), nil
}

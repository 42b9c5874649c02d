package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/rs/zerolog"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/admin"
	"github.com/touba/touba-trigger/handler/egress"
	"github.com/touba/touba-trigger/server"
)

// session is the API a command talks to, and how to let go of it.
type session struct {
	api   admin.API
	who   string // the operator, for the audit trail; "" over the socket, whose peer credentials name it
	close func() error
	// note, on the files, says which (printed after the command's output,
	// or after its refusal line).
	note string
}

// open reaches the daemon on its socket or, when none answers there,
// opens the files under the journal lock (exit 3 when a daemon holds it).
// A read-only command opens them read-only instead, without the lock (SPEC
// §6), unless their schema is older than this build (then it takes the
// lock to migrate them, as before).
func (f *Operator) open(ctx context.Context, stderr io.Writer, readOnly bool) (*session, error) {
	c, err := admin.Dial(f.AdminSocket)
	if err == nil {
		return &session{api: c, close: func() error { return nil }}, nil
	} else if !errors.Is(err, admin.ErrNoDaemon) {
		return nil, err
	}
	if readOnly {
		s, err := f.openFiles(ctx, stderr, true)
		if err == nil {
			s.note = f.filesNote(true)
		}
		if !errors.Is(err, server.ErrSchemaBehind) {
			return s, err
		}
	}
	s, err := f.openFiles(ctx, stderr, false)
	if err == nil {
		s.note = f.filesNote(false)
	}
	return s, err
}

// filesNote tells the operator that no daemon answered and which files
// (or which database) the command worked on instead: a command run in the
// wrong folder would otherwise read that folder's .touba/ files without a
// word.
func (f *Operator) filesNote(readOnly bool) string {
	how := "worked on"
	if readOnly {
		how = "read"
	}
	if f.Database != "" {
		return fmt.Sprintf("note: no daemon answers on %s; %s the database of --database", f.AdminSocket, how)
	}
	var files []string
	for _, p := range []string{f.Queue, f.State, f.Journal} {
		if p == "" {
			continue
		}
		if _, err := os.Stat(p); err != nil {
			continue // not opened: an optional file that does not exist
		}
		if abs, err := filepath.Abs(p); err == nil {
			p = abs
		}
		files = append(files, p)
	}
	return fmt.Sprintf("note: no daemon answers on %s; %s the files %s", f.AdminSocket, how, strings.Join(files, ", "))
}

func (f *Operator) openFiles(ctx context.Context, stderr io.Writer, readOnly bool) (*session, error) {
	deny, err := egress.ParseList(f.EgressDeny)
	if err != nil {
		return nil, Usagef("--egress-deny: %w", err)
	}
	log := zerolog.New(zerolog.ConsoleWriter{Out: stderr, NoColor: !IsTerminal(stderr)}).Level(zerolog.WarnLevel).With().Timestamp().Logger()
	files, err := server.OpenFiles(ctx, server.FilesConfig{Queue: f.Queue, State: f.State, Journal: f.Journal, Database: f.Database,
		TakeOverStaleLock: f.TakeOverStaleLock, ReadOnly: readOnly, Program: f.Program, Manifest: f.Manifest,
		ExpressionCostLimit: f.ExpressionCostLimit, AllowUnisolatedHandlers: f.AllowUnisolated, EgressDeny: deny, Log: log, Notes: stderr})
	if errors.Is(err, server.ErrNoFiles) {
		// Never create files an operator only meant to look at.
		return nil, touba.Errorf(touba.EDaemonUnavailable, "no daemon answers on %s and %v; give --admin-socket, or --queue, --state and --effect-journal", f.AdminSocket, err)
	} else if err != nil {
		return nil, err
	}
	return &session{api: files.Service, who: files.Operator, close: files.Close}, nil
}

// Session runs fn on the admin API of the daemon, or of the files when
// none runs (see open), and lets go of it.
func (f *Operator) Session(ctx context.Context, stderr io.Writer, fn func(ctx context.Context, api admin.API) error) error {
	return f.session(ctx, stderr, false, fn)
}

// ReadSession is Session for a command that only reads: with no daemon,
// the files are opened read-only and without the journal lock.
func (f *Operator) ReadSession(ctx context.Context, stderr io.Writer, fn func(ctx context.Context, api admin.API) error) error {
	return f.session(ctx, stderr, true, fn)
}

func (f *Operator) session(ctx context.Context, stderr io.Writer, readOnly bool, fn func(ctx context.Context, api admin.API) error) error {
	s, err := f.open(ctx, stderr, readOnly)
	if err != nil {
		return err
	}
	if s.who != "" {
		ctx = admin.WithOperator(ctx, s.who)
	}
	err = fn(ctx, s.api)
	switch {
	case s.note != "" && err == nil:
		fmt.Fprintln(stderr, s.note)
	case s.note != "":
		err = Noted{Err: err, Note: s.note}
	}
	return errors.Join(err, s.close())
}

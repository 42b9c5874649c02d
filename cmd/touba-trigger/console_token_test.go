package main

import (
	"io"
	"os"
	"path/filepath"
	"testing"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/cli"
)

// TestConsoleFlags: --console-listen needs a token, from
// --console-token-file or the systemd credential console-token; without
// one serve refuses with ConsoleTokenRequired (exit 2); without
// --console-listen the console stays off whatever token there is.
func TestConsoleFlags(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "token")
	os.WriteFile(good, []byte("a-long-enough-console-token\n"), 0o600)
	short := filepath.Join(dir, "short")
	os.WriteFile(short, []byte("short\n"), 0o600)
	creds := t.TempDir()
	os.WriteFile(filepath.Join(creds, "console-token"), []byte("token-from-the-credential"), 0o600)
	for _, tc := range []struct {
		name, credDir, code, token string
		args                       []string
	}{
		{"off", "", "", "", nil},
		{"listen without token", "", touba.EConsoleTokenRequired, "", []string{"--console-listen", "127.0.0.1:0"}},
		{"token file", "", "", "a-long-enough-console-token", []string{"--console-listen", "127.0.0.1:0", "--console-token-file", good}},
		{"short token", "", touba.EConsoleTokenRequired, "", []string{"--console-listen", "127.0.0.1:0", "--console-token-file", short}},
		{"missing file", "", touba.EConsoleTokenRequired, "", []string{"--console-listen", "127.0.0.1:0", "--console-token-file", short + "x"}},
		{"credential", creds, "", "token-from-the-credential", []string{"--console-listen", "127.0.0.1:0"}},
		{"token without listen", creds, "", "", []string{"--console-token-file", good}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("CREDENTIALS_DIRECTORY", tc.credDir)
			c := &ServeCommand{}
			err := c.ParseFlags(append(append([]string{"--manifest", "m.json"}, tc.args...), "program.json"), io.Discard)
			if got := touba.ErrorCode(err); got != tc.code {
				t.Fatalf("code %q (%v), want %q", got, err, tc.code)
			}
			if tc.code != "" {
				if ec := cli.ExitCode(err, io.Discard); ec != cli.ExitUsage {
					t.Fatalf("exit %d, want %d", ec, cli.ExitUsage)
				}
				return
			}
			if string(c.cfg.ConsoleToken) != tc.token {
				t.Fatalf("token %q, want %q", c.cfg.ConsoleToken, tc.token)
			}
		})
	}
}

package server

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"

	touba "github.com/touba/touba-trigger"
)

// consoleCredential is the systemd credential (LoadCredential=) that holds
// the console's token when --console-token-file is not given.
const consoleCredential = "console-token"

// minConsoleToken bounds how short a token may be: it is the only thing
// between the network and the operator's actions.
const minConsoleToken = 16

// LoadConsoleToken reads the console's token from file, or else from
// $CREDENTIALS_DIRECTORY/console-token. No token refuses start-up: a
// console without one would answer nobody, or everybody.
func LoadConsoleToken(file string) ([]byte, error) {
	if file == "" {
		if dir := os.Getenv("CREDENTIALS_DIRECTORY"); dir != "" {
			cred := filepath.Join(dir, consoleCredential)
			if _, err := os.Stat(cred); err == nil {
				file = cred
			}
		}
	}
	if file == "" {
		return nil, touba.Errorf(touba.EConsoleTokenRequired,
			"--console-listen needs a token: give --console-token-file FILE or the systemd credential %s", consoleCredential)
	}
	b, err := os.ReadFile(file)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, touba.Errorf(touba.EConsoleTokenRequired, "console token file %s does not exist", file)
	} else if err != nil {
		return nil, touba.Errorf(touba.ECONFIG, "console token file %s: %v", file, err)
	}
	tok := bytes.TrimSpace(b)
	if len(tok) < minConsoleToken {
		return nil, touba.Errorf(touba.EConsoleTokenRequired, "console token in %s is empty or shorter than %d bytes", file, minConsoleToken)
	}
	return tok, nil
}

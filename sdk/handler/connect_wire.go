package handler

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
)

// statusError is an answer of the daemon other than 200.
type statusError struct {
	status int
	code   string
	msg    string
}

func (e *statusError) Error() string {
	if e.code != "" {
		return fmt.Sprintf("%d %s: %s", e.status, e.code, e.msg)
	}
	return fmt.Sprintf("HTTP %d", e.status)
}

// post sends body to the daemon's path with the worker's token and
// returns the answer's body. 401 and 403 are ErrWorkerRefused.
func (c *conn) post(ctx context.Context, path string, body []byte) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+path, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+c.w.Token)
	resp, err := c.w.Client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 256<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode == http.StatusOK {
		return b, nil
	}
	se := &statusError{status: resp.StatusCode}
	var e struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal(b, &e) == nil {
		se.code, se.msg = e.Error.Code, e.Error.Message
	}
	if resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden {
		return nil, fmt.Errorf("%w: %w", ErrWorkerRefused, se)
	}
	return nil, se
}

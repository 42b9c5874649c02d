package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"syscall"
	"time"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/httpjson"
)

// ErrNoDaemon is returned by Dial when no daemon serves the socket: the
// file is absent, or nothing accepts on it (a daemon that died).
var ErrNoDaemon = errors.New("no daemon on the admin socket")

// Client is the API of a running daemon, over its admin socket.
type Client struct {
	path string
	hc   *http.Client
}

var _ API = (*Client)(nil)

// Dial checks that a daemon answers on the socket at path and returns a
// client for it, or ErrNoDaemon (wrapped) when none does. Any other
// failure (such as permission denied) is returned as is: the CLI must not
// then fall back to opening the files a daemon may be using.
func Dial(path string) (*Client, error) {
	c, err := net.DialTimeout("unix", path, 2*time.Second)
	if errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED) {
		return nil, fmt.Errorf("%w at %s", ErrNoDaemon, path)
	} else if err != nil {
		return nil, fmt.Errorf("admin socket %s: %w", path, err)
	}
	c.Close()
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		},
		MaxIdleConns: 1,
	}
	return &Client{path: path, hc: &http.Client{Transport: tr}}, nil
}

// Path returns the socket's path.
func (c *Client) Path() string { return c.path }

// do sends one request; a JSON error answer becomes a *touba.Error with
// its code.
func (c *Client) do(ctx context.Context, method, path string, in, out any) error {
	var body *bytes.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	} else {
		body = bytes.NewReader(nil)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://touba-admin"+path, body)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.hc.Do(req)
	if err != nil {
		return fmt.Errorf("admin socket %s: %w", c.path, err)
	}
	defer resp.Body.Close()
	dec := json.NewDecoder(resp.Body)
	if resp.StatusCode != http.StatusOK {
		var eb httpjson.ErrorBody
		if err := dec.Decode(&eb); err != nil || eb.Error.Code == "" {
			return fmt.Errorf("admin socket %s: answered %s", c.path, resp.Status)
		}
		return &touba.Error{Code: eb.Error.Code, Message: eb.Error.Message}
	}
	if err := dec.Decode(out); err != nil {
		return fmt.Errorf("admin socket %s: decode answer: %w", c.path, err)
	}
	return nil
}

func get[T any](ctx context.Context, c *Client, path string) (T, error) {
	var out T
	err := c.do(ctx, http.MethodGet, path, nil, &out)
	return out, err
}

func post[T any](ctx context.Context, c *Client, path string, in any) (T, error) {
	var out T
	err := c.do(ctx, http.MethodPost, path, in, &out)
	return out, err
}

// Entries implements API.
func (c *Client) Entries(ctx context.Context, f EntryFilter) ([]Entry, error) {
	return get[[]Entry](ctx, c, "/v1/entries"+queryOf("status", f.Status, "trigger_ref", f.TriggerRef, "limit", strconv.Itoa(f.Limit),
		"held", strconv.FormatBool(f.Held), "after", f.After, "oldest", strconv.FormatBool(f.Oldest), "before", f.Before))
}

// Search implements API.
func (c *Client) Search(ctx context.Context, r SearchRequest) (*SearchReport, error) {
	since := ""
	if !r.Since.IsZero() {
		since = r.Since.UTC().Format(time.RFC3339Nano)
	}
	// Not queryOf: an event id or body filter may well be "0" or "false".
	v := url.Values{}
	for k, x := range map[string]string{"queue_id": r.QueueID, "event_id": r.EventID, "body": r.Body, "trigger_ref": r.TriggerRef,
		"status": r.Status, "since": since} {
		if x != "" {
			v.Set(k, x)
		}
	}
	if r.MaxScan > 0 {
		v.Set("max_scan", strconv.Itoa(r.MaxScan))
	}
	if r.Limit > 0 {
		v.Set("limit", strconv.Itoa(r.Limit))
	}
	return get[*SearchReport](ctx, c, "/v1/search?"+v.Encode())
}

// Entry implements API.
func (c *Client) Entry(ctx context.Context, queueID string) (*EntryDetail, error) {
	return get[*EntryDetail](ctx, c, "/v1/entries/"+url.PathEscape(queueID))
}

// ReplayEntries implements API.
func (c *Client) ReplayEntries(ctx context.Context, r ReplayRequest) (*ReplayReport, error) {
	return post[*ReplayReport](ctx, c, "/v1/entries/replay", r)
}

// Deliveries implements API.
func (c *Client) Deliveries(ctx context.Context, f DeliveryFilter) ([]touba.LoggedDelivery, error) {
	since := ""
	if !f.Since.IsZero() {
		since = f.Since.UTC().Format(time.RFC3339Nano)
	}
	return get[[]touba.LoggedDelivery](ctx, c, "/v1/deliveries"+queryOf("rejected", strconv.FormatBool(f.Rejected),
		"refused", strconv.FormatBool(f.Refused), "code", f.Code,
		"trigger_ref", f.TriggerRef, "since", since, "before", f.Before, "limit", strconv.Itoa(f.Limit)))
}

// Delivery implements API.
func (c *Client) Delivery(ctx context.Context, id string) (*DeliveryDetail, error) {
	return get[*DeliveryDetail](ctx, c, "/v1/deliveries/"+url.PathEscape(id))
}

// ReplayDelivery implements API.
func (c *Client) ReplayDelivery(ctx context.Context, r DeliveryReplayRequest) (*DeliveryReplay, error) {
	return post[*DeliveryReplay](ctx, c, "/v1/deliveries/replay", r)
}

// Effects implements API.
func (c *Client) Effects(ctx context.Context, f EffectFilter) ([]touba.Effect, error) {
	return get[[]touba.Effect](ctx, c, "/v1/effects"+queryOf("state", f.State, "scope", f.Scope, "limit", strconv.Itoa(f.Limit)))
}

// Resolve implements API.
func (c *Client) Resolve(ctx context.Context, r ResolveRequest) (*ResolveResult, error) {
	return post[*ResolveResult](ctx, c, "/v1/effects/resolve", r)
}

// Compensate implements API.
func (c *Client) Compensate(ctx context.Context, r CompensateRequest) (*touba.Compensation, error) {
	return post[*touba.Compensation](ctx, c, "/v1/effects/compensate", r)
}

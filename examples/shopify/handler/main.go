// Command handler is the stand-in catalog of the Shopify example
// (examples/shopify): SyncProduct writes one product's latest state to a
// search index, once per storm of products/update webhooks (the trigger
// debounces them per product). The index is .touba/catalog.jsonl under the
// handler's working directory (the manifest's folder): one JSON line per
// sync, with the product's id, title and updated_at as its last delivery
// had them, and how many webhooks (with their X-Shopify-Webhook-Id) the
// sync stands for, so a person or a test can see what reached it. The
// write is deduplicated by effect id, as a remote honouring
// Idempotency-Key does: a repeated call is recorded with "repeat": true.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/touba/touba-trigger/sdk/handler"
)

// Sync is one line of catalog.jsonl.
type Sync struct {
	EffectID  string    `json:"effect_id"`
	Shop      string    `json:"shop"`
	ProductID int64     `json:"product_id"`
	Title     string    `json:"title"`
	UpdatedAt string    `json:"updated_at"`
	Updates   int       `json:"updates"`     // webhooks this sync stands for
	Webhooks  []string  `json:"webhook_ids"` // their X-Shopify-Webhook-Id, in order
	At        time.Time `json:"at"`
	Repeat    bool      `json:"repeat,omitempty"`
}

// input is the step's input: the last delivery's product, the shop, and
// every gathered delivery (/events).
type input struct {
	Product struct {
		ID        int64  `json:"id"`
		Title     string `json:"title"`
		UpdatedAt string `json:"updated_at"`
	} `json:"product"`
	Shop    string `json:"shop"`
	Updates []struct {
		EventID string `json:"event_id"`
	} `json:"updates"`
}

func main() {
	handler.Main(handler.Tool{Ref: "tool:examples.shopify/SyncProduct", Run: sync})
}

func sync(ctx context.Context, c *handler.Call) (*handler.Result, error) {
	eff := c.Effect()
	if eff == nil {
		return nil, handler.Errorf("EffectContextRequired", "SyncProduct is an external write")
	}
	var in input
	if err := c.Decode(&in); err != nil {
		return nil, handler.Errorf("BadInput", "input: %v", err).WithReceipt(c.Receipt(handler.NotApplied, ""))
	}
	s := Sync{EffectID: eff.EffectID, Shop: in.Shop, ProductID: in.Product.ID, Title: in.Product.Title,
		UpdatedAt: in.Product.UpdatedAt, Updates: len(in.Updates), At: time.Now().UTC()}
	for _, u := range in.Updates {
		s.Webhooks = append(s.Webhooks, u.EventID)
	}
	if err := record(filepath.Join(".touba", "catalog.jsonl"), &s); err != nil {
		return nil, handler.Errorf("CatalogUnavailable", "%v", err).WithReceipt(c.Receipt(handler.Unknown, ""))
	}
	return handler.Output(map[string]any{"product_id": s.ProductID, "updates": s.Updates, "repeat": s.Repeat}).
		WithReceipt(c.Receipt(handler.Applied, "catalog:"+eff.EffectID)), nil
}

// record appends s, marked a repeat when its effect id was written before.
func record(path string, s *Sync) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	// Several handler processes may run at once: flock orders them.
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		return err
	}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var old Sync
		if json.Unmarshal(sc.Bytes(), &old) == nil && old.EffectID == s.EffectID && !old.Repeat {
			s.Repeat = true
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	line, err := json.Marshal(s)
	if err != nil {
		return err
	}
	if _, err := f.Write(append(line, '\n')); err != nil {
		return err
	}
	return f.Sync()
}

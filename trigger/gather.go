package trigger

import (
	"strconv"
	"time"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/expr"
	"github.com/touba/touba-trigger/internal/strictjson"
)

// Debounce and batch (SPEC §2.1): deliveries of one key value gathered
// into one run. This file loads the two fields strictly and gives each
// delivery its gathering at intake (SetGather); the queue store gathers
// (touba.GatherStore) and the dispatcher hands the run every gathered
// delivery (/events).

// Gather is a trigger's debounce or batch.
type Gather struct {
	Kind string // touba.GatherDebounce or touba.GatherBatch
	// KeyRef is the key's pointer into /event; "" for a batch without a
	// key (one gathering per trigger).
	KeyRef string
	// KeyCEL is a {"cel": EXPR} key instead of KeyRef (SPEC §2.4).
	KeyCEL    *expr.Expr
	WindowMS  int64
	MaxWaitMS int64 // debounce
	MaxSize   int   // batch
	// MaxBytes bounds the bodies of one gathering (max_bytes, both kinds;
	// touba.DefaultGatherMaxBytes when the program names none): past it
	// the gathering starts at once (issue 43).
	MaxBytes int64
	key      string
}

// Bounds of the loader.
const (
	maxGatherMS = 86_400_000 // a day
	// DebounceMaxWaitFactor: without max_wait_ms, a debounce gathering
	// starts at the latest this many windows after its first delivery.
	DebounceMaxWaitFactor = 10
	// minGatherMaxBytes: max_bytes below a kilobyte would start nearly
	// every gathering at its second delivery.
	minGatherMaxBytes = 1024
)

// maxBytes reads a debounce's or batch's optional max_bytes into g.
func (w walker) maxBytes(path string, m strictjson.Fields, g *Gather) error {
	g.MaxBytes = touba.DefaultGatherMaxBytes
	v, ok := m["max_bytes"]
	if !ok {
		return nil
	}
	n, err := w.Integer(path+".max_bytes", v, touba.MaxGatherMaxBytes)
	if err != nil {
		return err
	}
	if n < minGatherMaxBytes {
		return w.Fail(path+".max_bytes", "must be at least %d: a gathering of a few bytes gathers nothing", minGatherMaxBytes)
	}
	g.MaxBytes = n
	return nil
}

// gather loads a trigger's debounce or batch, refusing both, and either
// on a schedule trigger (its ticks are one run each by nature).
func (w walker) gather(path string, m strictjson.Fields, t *Trigger) error {
	d, hasD := m["debounce"]
	b, hasB := m["batch"]
	switch {
	case !hasD && !hasB:
		return nil
	case hasD && hasB:
		return w.Fail(path+".batch", "debounce and batch exclude each other: a trigger gathers its deliveries one way")
	case t.IsSchedule() && hasD:
		return w.Fail(path+".debounce", "a schedule trigger takes no debounce: each tick is its own run")
	case t.IsSchedule():
		return w.Fail(path+".batch", "a schedule trigger takes no batch: each tick is its own run")
	}
	var err error
	if hasD {
		t.Gather, err = w.debounce(path+".debounce", d, t.bounds())
	} else {
		t.Gather, err = w.batch(path+".batch", b, t.bounds())
	}
	if err != nil {
		return err
	}
	t.Gather.key = touba.GatherKeyOf(t.Gather.Kind, t.Gather.keyName())
	return nil
}

func (w walker) debounce(path string, raw *strictjson.Node, b expr.Bounds) (*Gather, error) {
	m, err := w.Object(path, raw, []string{"key", "window_ms", "max_wait_ms", "max_bytes"}, "key", "window_ms")
	if err != nil {
		return nil, err
	}
	g := &Gather{Kind: touba.GatherDebounce}
	if g.KeyRef, g.KeyCEL, err = w.eventKey(path+".key", m["key"], "gather deliveries", b); err != nil {
		return nil, err
	}
	if g.WindowMS, err = w.Integer(path+".window_ms", m["window_ms"], maxGatherMS); err != nil {
		return nil, err
	}
	g.MaxWaitMS = min(DebounceMaxWaitFactor*g.WindowMS, maxGatherMS)
	if v, ok := m["max_wait_ms"]; ok {
		if g.MaxWaitMS, err = w.Integer(path+".max_wait_ms", v, maxGatherMS); err != nil {
			return nil, err
		}
		if g.MaxWaitMS < g.WindowMS {
			return nil, w.Fail(path+".max_wait_ms", "must not be below window_ms (%d): the run would start before the window could end", g.WindowMS)
		}
	}
	if err := w.maxBytes(path, m, g); err != nil {
		return nil, err
	}
	return g, nil
}

func (w walker) batch(path string, raw *strictjson.Node, b expr.Bounds) (*Gather, error) {
	m, err := w.Object(path, raw, []string{"key", "max_size", "window_ms", "max_bytes"}, "max_size", "window_ms")
	if err != nil {
		return nil, err
	}
	g := &Gather{Kind: touba.GatherBatch}
	if v, ok := m["key"]; ok {
		if g.KeyRef, g.KeyCEL, err = w.eventKey(path+".key", v, "gather deliveries", b); err != nil {
			return nil, err
		}
	}
	n, err := w.Integer(path+".max_size", m["max_size"], touba.MaxGathered)
	if err != nil {
		return nil, err
	}
	if n < 2 {
		return nil, w.Fail(path+".max_size", "must be at least 2: a batch of one is a run of its own")
	}
	g.MaxSize = int(n)
	if g.WindowMS, err = w.Integer(path+".window_ms", m["window_ms"], maxGatherMS); err != nil {
		return nil, err
	}
	if err := w.maxBytes(path, m, g); err != nil {
		return nil, err
	}
	return g, nil
}

// SetGather gives d, about to be enqueued for t, its gathering: the key
// and the value its key resolves to, with t's times and size. A delivery
// whose key resolves to nothing (or null) is not gathered: it runs on its
// own, as concurrency leaves such a delivery unlimited. Nothing for a
// trigger without debounce or batch. Intake calls it; so must any other
// path that enqueues a delivery of t.
//
// A key expression that fails leaves d ungathered; SetKeys, which intake
// calls, refuses it instead (ExpressionFailed).
func (t *Trigger) SetGather(d *touba.Delivery) { _ = t.setGather(d, nil) }

func (t *Trigger) setGather(d *touba.Delivery, b *lazyBody) error {
	g := t.Gather
	if g == nil {
		return nil
	}
	value := ""
	switch {
	case g.KeyCEL != nil:
		var err error
		if value, err = exprKey(g.KeyCEL, intakeVars(d, b)); err != nil {
			return err
		}
		if value == "" {
			return nil
		}
	case g.KeyRef != "":
		if value = keyValue(g.KeyRef, t.Ref, d.EventID, d.ReceivedAt, d.Headers, d.Body, nil); value == "" {
			return nil
		}
	}
	d.Gather = &touba.GatherSpec{Kind: g.Kind, Key: g.key, Value: value,
		Window: ms(g.WindowMS), MaxWait: ms(g.MaxWaitMS), MaxSize: g.MaxSize, MaxBytes: g.MaxBytes}
	return nil
}

// keyName is the key's pointer or "cel:" and its expression: what names
// the gathering by meaning, and what messages show.
func (g *Gather) keyName() string {
	if g.KeyCEL != nil {
		return "cel:" + g.KeyCEL.Source
	}
	return g.KeyRef
}

func ms(n int64) time.Duration { return time.Duration(n) * time.Millisecond }

// Describe says how t gathers, as `check` prints it; "" when it does not.
func (g *Gather) Describe() string {
	if g == nil {
		return ""
	}
	limit := ", started at once past " + byteSize(g.MaxBytes) + " of bodies"
	key := "one gathering for the trigger"
	if k := g.keyName(); k != "" {
		key = "per " + k
	}
	if g.Kind == touba.GatherDebounce {
		return "debounce " + key + ": a run " + ms(g.WindowMS).String() + " after the last delivery, at most " +
			ms(g.MaxWaitMS).String() + " after the first" + limit
	}
	return "batch " + key + ": a run per " + strconv.Itoa(g.MaxSize) + " deliveries, or " + ms(g.WindowMS).String() + " after the first" + limit
}

// byteSize writes n bytes in MiB or KiB when it is a whole number of
// them.
func byteSize(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return strconv.FormatInt(n>>20, 10) + " MiB"
	case n >= 1<<10 && n%(1<<10) == 0:
		return strconv.FormatInt(n>>10, 10) + " KiB"
	}
	return strconv.FormatInt(n, 10) + " bytes"
}

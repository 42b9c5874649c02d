package brokers_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/testkit"
)

// kafkaManifest produces to topic orders on brokers, keyed by the shop.
func kafkaManifest(brokers string, mode, extra string) string {
	return fmt.Sprintf(`{"manifest_version": "touba-manifest-v1", "bindings": {
  "tool:orders/Publish": {"handler": {"kind": "kafka", "options": {"brokers": [%q], "topic": "orders",
      "key": "{/shop_domain}", "timeout_sec": 2%s}},
    "effect_contract": {"kind": "external_write", "retry_mode": %q}}}}`, brokers, extra, mode)
}

func newKafka(t *testing.T) *kfake.Cluster {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "orders"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// records reads every record of topic orders.
func records(t *testing.T, c *kfake.Cluster) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumeTopics("orders"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var out []*kgo.Record
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		fs := cl.PollFetches(ctx)
		cancel()
		n := 0
		fs.EachRecord(func(r *kgo.Record) { out = append(out, r); n++ })
		if n == 0 {
			return out
		}
	}
}

func header(r *kgo.Record, key string) string {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

// N deliveries through the real binary: N records, each once, keyed by the
// shop, with the touba-effect-id, touba-event-id and touba-trigger headers.
func TestKafkaDeliveries(t *testing.T) {
	c := newKafka(t)
	w := newDaemon(t, kafkaManifest(c.ListenAddrs()[0], "reconcile", ""))
	w.start()
	const n = 40
	var ids []string
	for i := range n {
		status, id := w.post(fmt.Sprintf("ord-%d", i), "shop-"+fmt.Sprint(i%2))
		if status != http.StatusAccepted {
			t.Fatalf("post %d: %d", i, status)
		}
		ids = append(ids, id)
	}
	var recs []*kgo.Record
	testkit.WaitFor(t, 60*time.Second, func() bool { recs = records(t, c); return len(recs) >= n }, "n records")
	w.stop()
	recs = records(t, c)
	seen := map[string]int{}
	for _, r := range recs {
		seen[header(r, "touba-effect-id")]++
		if !strings.HasPrefix(string(r.Key), "shop-") || !strings.HasPrefix(header(r, "touba-event-id"), "ord-") ||
			header(r, "touba-trigger") != "trigger:shop/Orders" || !strings.Contains(string(r.Value), `"total"`) {
			t.Fatalf("record key %q headers %v value %s", r.Key, r.Headers, r.Value)
		}
	}
	for _, id := range ids {
		if seen[id+":publish"] != 1 {
			t.Errorf("effect %s:publish is %d times in the topic", id, seen[id+":publish"])
		}
	}
	if len(recs) != n {
		t.Errorf("%d records, want %d", len(recs), n)
	}
	for _, e := range testkit.Entries(t, w.queue) {
		if e.Status != touba.StatusDone {
			t.Errorf("entry %s is %s", e.QueueID, e.Status)
		}
	}
}

// retry_mode idempotency_key without options.transactional_id is refused
// at load: the idempotent producer deduplicates within one session only.
func TestKafkaIdempotencyKeyRefusedWithoutTransactionalID(t *testing.T) {
	dir := t.TempDir()
	prog := writeFile(t, dir, "program.air.json", program)
	man := writeFile(t, dir, "touba.manifest.json", kafkaManifest("127.0.0.1:9092", "idempotency_key", ""))
	out, err := exec.Command(testkit.Binary(t), "check", prog, "--manifest", man).CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 ||
		!strings.Contains(string(out), `effect_contract.retry_mode: idempotency_key is refused for a kafka binding without options.transactional_id`) {
		t.Fatalf("check: %v\n%s", err, out)
	}
	man2 := writeFile(t, dir, "ok.manifest.json", kafkaManifest("127.0.0.1:9092", "idempotency_key", `, "transactional_id": "touba-orders"`))
	out, err = exec.Command(testkit.Binary(t), "check", prog, "--manifest", man2).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "dedupe window: none across producer sessions: an unknown publish is parked") {
		t.Fatalf("check with transactional_id: %v\n%s", err, out)
	}
}

// A produce whose connection the broker closes gets no acknowledgement: the
// effect is unknown, and with no dedupe window across producer sessions it
// is parked EffectReconciliationRequired naming its effect id, never
// produced again.
func TestKafkaUnknownIsParked(t *testing.T) {
	c := newKafka(t)
	w := newDaemon(t, kafkaManifest(c.ListenAddrs()[0], "idempotency_key", `, "transactional_id": "touba-orders"`))
	w.start()
	c.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		return nil, errors.New("connection dropped by the test"), true
	})
	_, id := w.post("ord-1", "shop-1")
	testkit.WaitFor(t, 60*time.Second, func() bool {
		d := w.entry(id)
		return d != nil && d.Status == touba.StatusParked
	}, "the entry parked")
	d := w.entry(id)
	w.stop()
	if d.ErrorCode != touba.EEffectReconciliationRequired || !strings.Contains(d.ErrorMessage, id+":publish") ||
		!strings.Contains(d.ErrorMessage, "topic orders") {
		t.Fatalf("entry %s %s: %s", d.Status, d.ErrorCode, d.ErrorMessage)
	}
	effects, events := testkit.Effects(t, filepath.Join(w.dir, "j.sqlite"))
	if len(effects) != 1 || effects[0].State != touba.EffectUnknown {
		t.Fatalf("effects %+v", effects)
	}
	dispatched := 0
	for _, ev := range events[id+":publish"] {
		if ev.State == touba.EffectDispatched {
			dispatched++
		}
	}
	if dispatched != 1 {
		t.Errorf("the effect was dispatched %d times, want once", dispatched)
	}
}

// A seed broker in a range --egress-deny refuses: EgressForbidden, never
// dialled.
func TestKafkaEgressForbidden(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var accepted atomic.Int32
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			c.Close()
		}
	}()
	w := newDaemon(t, kafkaManifest(l.Addr().String(), "reconcile", ""), "--egress-deny", "127.0.0.0/8")
	w.start()
	_, id := w.post("ord-1", "shop-1")
	testkit.WaitFor(t, 30*time.Second, func() bool {
		d := w.entry(id)
		return d != nil && d.Status == touba.StatusFailed
	}, "the entry failed")
	d := w.entry(id)
	w.stop()
	if d.ErrorCode != touba.EEgressForbidden || accepted.Load() != 0 {
		t.Fatalf("entry %s %s (%s); %d connections reached the address", d.Status, d.ErrorCode, d.ErrorMessage, accepted.Load())
	}
}

package rabbittest_test

import (
	"context"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/touba/touba-trigger/internal/rabbittest"
)

// A node starts, keeps a confirmed persistent message across a SIGKILL and
// a restart, and reads it back without taking it.
func TestNodeKeepsAConfirmedMessageAcrossAKill(t *testing.T) {
	n := rabbittest.Start(t)
	n.Declare("ex", "direct", "q", "k")
	c := n.Conn()
	ch, err := c.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	dc, err := ch.PublishWithDeferredConfirmWithContext(context.Background(), "ex", "k", true, false,
		amqp.Publishing{MessageId: "m-1", DeliveryMode: amqp.Persistent, Body: []byte("hello")})
	if err != nil {
		t.Fatal(err)
	}
	if !dc.Wait() {
		t.Fatal("nacked")
	}
	n.Kill()
	n.Restart()
	for range 2 {
		msgs := n.Messages("q")
		if len(msgs) != 1 || msgs[0].MessageID != "m-1" || msgs[0].Body != "hello" {
			t.Fatalf("messages %+v", msgs)
		}
	}
	if got := n.Count("q"); got != 1 {
		t.Fatalf("count %d", got)
	}
}
